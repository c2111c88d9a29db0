#!/usr/bin/env python3
"""Offline example generator for the drone-router task (stdlib only).

Each example maps one natural-language drone instruction to one line of
compact JSON: {"cmd": "<name>", "args": {...}}.  The rules the generator
follows (defaults, waypoint list, feet conversion, safety limits) are
documented in BACKGROUND.md; keep the two in sync.

Public API:
    generate(n, *, seed=0, focus=None) -> list[dict]

`focus` RESTRICTS generation to the listed categories (command names); the
examples are spread evenly over them.  Without `focus`, all nine categories
are spread evenly (so `unknown` is about 11%).

CLI:
    python generator.py --n 500 --seed 0 [--focus hover,loiter] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys

# --------------------------------------------------------------------------
# Task constants (mirrored in BACKGROUND.md)
# --------------------------------------------------------------------------
COMMANDS = [
    "takeoff",
    "land",
    "goto_waypoint",
    "rtl",
    "hover",
    "loiter",
    "ascend",
    "descend",
    "unknown",
]

WAYPOINTS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "home_pad",
    "tower",
    "depot",
    "ridge",
]

# Names that look like waypoints but are not on the list -> unknown.
BOGUS_PLACES = [
    "zulu",
    "kilo",
    "lima",
    "mike",
    "oscar",
    "sierra",
    "tango",
    "victor",
    "whiskey",
    "yankee",
    "the lake",
    "the parking lot",
    "the barn",
    "the school",
    "the red house",
    "the bridge",
]

DEFAULT_TAKEOFF_ALT_M = 10
DEFAULT_HOVER_S = 0  # 0 = hold until told otherwise
DEFAULT_LOITER_RADIUS_M = 20
DEFAULT_LOITER_S = 0  # 0 = loiter until told otherwise
DEFAULT_STEP_M = 5  # ascend/descend with no amount
MAX_ALT_M = 120  # takeoff/ascend/descend amounts above this -> unknown
FT_TO_M = 0.3048


def feet_to_m(ft: int) -> int:
    """Feet -> whole meters, rounded half up (100 ft -> 30, 150 ft -> 46)."""
    return int(ft * FT_TO_M + 0.5)


def to_json(cmd: str, args: dict) -> str:
    return json.dumps({"cmd": cmd, "args": args}, separators=(", ", ": "))


# --------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------
NUM_WORDS = {
    1: ["one"],
    2: ["two"],
    3: ["three"],
    4: ["four"],
    5: ["five"],
    6: ["six"],
    7: ["seven"],
    8: ["eight"],
    9: ["nine"],
    10: ["ten"],
    12: ["twelve"],
    15: ["fifteen"],
    20: ["twenty"],
    25: ["twenty-five", "twenty five"],
    30: ["thirty"],
    40: ["forty"],
    45: ["forty-five", "forty five"],
    50: ["fifty"],
    60: ["sixty"],
    75: ["seventy-five"],
    80: ["eighty"],
    90: ["ninety"],
    100: ["a hundred", "one hundred"],
    120: ["a hundred and twenty"],
    200: ["two hundred"],
    300: ["three hundred"],
    500: ["five hundred"],
    1000: ["a thousand", "one thousand"],
}
_NUMBER_WORD_TOKENS = sorted({t for ws in NUM_WORDS.values() for w in ws for t in re.split(r"[ -]", w)})

TAKEOFF_ALTS = [3, 5, 8, 10, 12, 15, 20, 25, 30, 35, 40, 45, 50, 60, 70, 75, 80, 90, 100, 110, 120]
STEP_VALUES = [1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50]
FEET_VALUES = [10, 20, 30, 50, 100, 150, 200, 300]
FEET_STEP_VALUES = [10, 20, 30, 50, 100]
OVER_LIMIT_M = [200, 250, 300, 400, 500, 800, 1000, 2000]
OVER_LIMIT_FT = [1000, 2000, 5000]
HOVER_SECONDS = [5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300]
LOITER_SECONDS = [10, 20, 30, 45, 60, 90, 120, 180, 300, 600]
LOITER_RADII = [5, 10, 15, 20, 25, 30, 40, 50, 75, 100]
MINUTE_VALUES = [1, 2, 3, 4, 5, 10]

PREFIXES = [
    "please ",
    "hey drone, ",
    "drone, ",
    "could you ",
    "can you ",
    "would you ",
    "ok ",
    "okay, ",
    "alright, ",
    "now ",
    "go ahead and ",
    "i need you to ",
    "i want you to ",
    "pilot here, ",
    "copy that, ",
    "quick, ",
    "hey, ",
    "please, ",
    "yo drone, ",
    "command: ",
    "next, ",
    "right, ",
    "drone please ",
    "hey there, ",
]
# Prefixes that expect a verb to follow ("could you" + "land").  Texts that do
# not start with a verb (questions, chit-chat, "rtl", "next stop ...") only get
# one of the vocative prefixes instead.
VERB_PREFIXES = [
    "please ",
    "could you ",
    "can you ",
    "would you ",
    "now ",
    "go ahead and ",
    "i need you to ",
    "i want you to ",
    "drone please ",
]
VOCATIVE_PREFIXES = [p for p in PREFIXES if p not in VERB_PREFIXES]
NONVERB_STARTS = (
    "what",
    "how",
    "who",
    "is ",
    "are ",
    "i ",
    "you",
    "thank",
    "hello",
    "hi ",
    "good",
    "nice",
    "???",
    "hmm",
    "uh",
    "never",
    "not ",
    "wait, what",
    "up ",
    "down ",
    "let's",
    "next",
    "time to",
    "your ",
    "a bit",
    "rtl",
    "rtb",
    "takeoff",
    "liftoff",
    "touchdown",
    "position",
    "radius",
    "waypoint",
    "land or",
    "climb or",
    "don't",
    "do not",
    "cancel",
    "tell me about",
)
SUFFIXES = [
    " please",
    " now",
    " thanks",
    " thank you",
    " asap",
    ", please",
    " right away",
    " when ready",
    " over",
    ", thanks",
    " for me",
    " when you can",
    " straight away",
    " right now",
    " quickly",
]
FILLERS = ["um ", "uh, ", "so ", "like, ", "ok so ", "hmm, ", "well, "]

# ---- takeoff ------------------------------------------------------------
TAKEOFF_ALT = [
    "take off to {alt}",
    "takeoff to {alt}",
    "take off and climb to {alt}",
    "lift off to {alt}",
    "launch to {alt}",
    "launch and hold at {alt}",
    "get airborne at {alt}",
    "take off, altitude {alt}",
    "start flying at {alt}",
    "take off and go up to {alt}",
    "take off to an altitude of {alt}",
    "take off to a height of {alt}",
    "launch the drone to {alt}",
    "take the drone up to {alt}",
    "lift off and level off at {alt}",
    "takeoff {alt}",
    "begin the flight at {alt}",
    "take off and hover at {alt}",
    "launch to a height of {alt}",
    "get airborne and climb to {alt}",
    "lift off to an altitude of {alt}",
    "take off at {alt}",
    "take off to {alt} and hold there",
    "get airborne, altitude {alt}",
    "time to take off, altitude {alt}",
    "lift off and hover at {alt}",
    "take off and hold at {alt}",
    "launch and climb to {alt}",
    "take off, then hover at {alt}",
    "let's take off to {alt}",
]
TAKEOFF_BARE = [
    "take off",
    "takeoff",
    "lift off",
    "liftoff",
    "launch",
    "launch the drone",
    "get airborne",
    "get in the air",
    "start the flight",
    "take off now",
    "get off the ground",
    "spin up and take off",
    "begin the flight",
    "take the drone up",
    "launch now",
    "go ahead and launch",
    "time to take off",
    "let's get airborne",
    "get the drone in the air",
    "take off and hold there",
]

# ---- land ---------------------------------------------------------------
LAND = [
    "land",
    "land now",
    "land the drone",
    "touch down",
    "set down",
    "set it down",
    "put it down",
    "bring it down and land",
    "land here",
    "land immediately",
    "land at your current position",
    "land right here",
    "come down and land",
    "initiate landing",
    "begin landing",
    "start the landing",
    "descend and land",
    "time to land",
    "perform a landing",
    "make a landing",
    "touchdown",
    "go ahead and land",
    "land it",
    "get on the ground",
    "put the drone down here",
    "land where you are",
    "land in place",
    "start landing now",
    "set the drone down",
    "land the aircraft",
    "touch down here",
    "touch down at your current position",
    "make a landing here",
    "land right here instead",
    "set it down right here",
    "start landing",
    "land here now",
    "land now, we're done",
    "bring the drone down and land",
    "put it down right here",
]

# ---- goto_waypoint ------------------------------------------------------
GOTO = [
    "go to {wp}",
    "fly to {wp}",
    "head to {wp}",
    "navigate to {wp}",
    "proceed to {wp}",
    "move to {wp}",
    "travel to {wp}",
    "make your way to {wp}",
    "set course for {wp}",
    "go over to {wp}",
    "fly over to {wp}",
    "head over to {wp}",
    "next stop {wp}",
    "your next waypoint is {wp}",
    "route to {wp}",
    "continue to {wp}",
    "reposition to {wp}",
    "relocate to {wp}",
    "goto {wp}",
    "fly the drone to {wp}",
    "head for {wp}",
    "go directly to {wp}",
    "fly straight to {wp}",
    "send the drone to {wp}",
    "move over to {wp}",
    "take the drone to {wp}",
    "go on to {wp}",
    "next, fly to {wp}",
    "make your way over to {wp}",
    "set a course for {wp}",
    "go straight to {wp}",
    "head straight over to {wp}",
    "now head to {wp}",
    "fly over to {wp} next",
    "next stop is {wp}",
    "move on to {wp}",
]
GOTO_HOME_PAD_EXTRA = ["return to {wp}", "fly back to {wp}", "go back to {wp}"]

# ---- rtl ----------------------------------------------------------------
RTL = [
    "return to launch",
    "rtl",
    "return home",
    "go home",
    "come home",
    "come back",
    "come back home",
    "fly home",
    "head home",
    "head back",
    "return to base",
    "rtb",
    "return to the launch point",
    "return to the takeoff point",
    "go back to where you started",
    "bring it home",
    "bring the drone back",
    "fly back to launch",
    "head back to base",
    "abort the mission and come home",
    "come back and land",
    "return",
    "go back home",
    "recall the drone",
    "return to launch point",
    "fly back home",
    "return to the start",
    "head back to the launch point",
    "come back to launch",
    "rtl now",
    "bring it back home",
    "return the drone home",
    "return to launch now",
    "come back home now",
    "head back home",
    "fly back to base",
    "come back to base",
    "return to base now",
    "bring the drone back home",
    "just come home",
    "return home now",
    "fly back to the start",
    "go back to base",
]

# ---- hover --------------------------------------------------------------
HOVER_BARE = [
    "hover",
    "hover here",
    "hold position",
    "hold",
    "stay put",
    "stay there",
    "stay where you are",
    "hold still",
    "stop and hover",
    "freeze",
    "pause",
    "wait here",
    "hang there",
    "keep still",
    "hold your position",
    "maintain position",
    "stop moving",
    "hold here",
    "stay in place",
    "remain in place",
    "keep hovering",
    "hover in place",
    "position hold",
    "stop right there",
    "stop and hold",
    "just hover",
    "hold it there",
    "stay right there",
    "wait there",
    "hold right there",
    "hold position right there",
    "stay put right there",
    "just stay put",
    "stop and wait there",
    "stay there and hold",
]
HOVER_DUR = [
    "hover for {dur}",
    "hold position for {dur}",
    "stay put for {dur}",
    "wait {dur}",
    "wait here for {dur}",
    "hang there for {dur}",
    "hold for {dur}",
    "pause for {dur}",
    "remain in place for {dur}",
    "hover in place for {dur}",
    "stay where you are for {dur}",
    "keep still for {dur}",
    "hover {dur}",
    "hold still for {dur}",
    "maintain position for {dur}",
    "freeze for {dur}",
    "hover here for {dur}",
    "stop and hover for {dur}",
    "hold your position for {dur}",
    "stay there for {dur}",
    "keep hovering for {dur}",
    "stay in place for {dur}",
    "hold here for {dur}",
    "wait there for {dur}",
    "hold right there for {dur}",
    "stay right there for {dur}",
    "hold position right there for {dur}",
    "just hover for {dur}",
    "wait right here for {dur}",
]

# ---- loiter -------------------------------------------------------------
LOITER_BARE = [
    "loiter",
    "loiter here",
    "circle",
    "circle here",
    "circle around",
    "orbit",
    "orbit here",
    "orbit this spot",
    "circle the area",
    "circle overhead",
    "fly in circles",
    "do some circles",
    "start circling",
    "start orbiting",
    "begin loitering",
    "orbit around this point",
    "circle this position",
    "loiter over this spot",
    "keep circling",
    "keep circling overhead",
    "orbit overhead",
    "circle around this spot",
    "start circling overhead",
]
LOITER_R = [
    "loiter with a radius of {r}",
    "circle with a {ra} radius",
    "orbit at a {ra} radius",
    "circle at a radius of {r}",
    "do a {ra} orbit",
    "loiter in a {ra} circle",
    "orbit with radius {r}",
    "circle here, radius {r}",
    "fly a {ra} radius circle",
    "start circling at a radius of {r}",
    "orbit this spot at a radius of {r}",
    "loiter, radius {r}",
    "circle around with a radius of {r}",
    "orbit here at a radius of {r}",
    "orbit this point with a {ra} radius",
    "circle overhead at a radius of {r}",
    "fly in circles with a {ra} radius",
    "do an orbit with a {ra} radius",
]
LOITER_D = [
    "loiter for {dur}",
    "circle for {dur}",
    "orbit for {dur}",
    "fly in circles for {dur}",
    "circle overhead for {dur}",
    "orbit here for {dur}",
    "loiter here for {dur}",
    "keep circling for {dur}",
    "circle the area for {dur}",
    "circle around for {dur}",
    "start circling overhead for {dur}",
    "keep circling overhead for {dur}",
    "orbit overhead for {dur}",
    "circle here for {dur}",
    "start orbiting for {dur}",
]
LOITER_RD = [
    "loiter for {dur} with a radius of {r}",
    "circle at a {ra} radius for {dur}",
    "orbit with a radius of {r} for {dur}",
    "loiter {dur}, radius {r}",
    "do a {ra} radius circle for {dur}",
    "circle here for {dur}, {ra} radius",
    "circle with radius {r} for {dur}",
    "orbit for {dur} at a radius of {r}",
    "loiter in a {ra} circle for {dur}",
    "fly {ra} radius circles for {dur}",
    "radius {r}, loiter for {dur}",
    "circle this spot for {dur} with a {ra} radius",
    "orbit here for {dur} with a radius of {r}",
    "circle for {dur} at a radius of {r}",
    "loiter here with a radius of {r} for {dur}",
    "fly in circles with a {ra} radius for {dur}",
    "orbit overhead for {dur} at a radius of {r}",
]

# ---- ascend -------------------------------------------------------------
ASCEND = [
    "climb {d}",
    "ascend {d}",
    "go up {d}",
    "gain {d}",
    "gain {d} of altitude",
    "gain altitude by {d}",
    "rise {d}",
    "move up {d}",
    "increase altitude by {d}",
    "raise altitude by {d}",
    "climb by {d}",
    "ascend by {d}",
    "go {d} higher",
    "fly {d} higher",
    "get {d} higher",
    "up {d}",
    "bump the altitude up by {d}",
    "take it up {d}",
    "lift {d}",
    "climb another {d}",
    "add {d} of altitude",
    "go higher by {d}",
    "raise the drone {d}",
    "climb up {d}",
    "go up another {d}",
    "increase height by {d}",
    "go up by {d}",
    "rise up {d}",
    "increase your altitude by {d}",
    "climb up another {d}",
    "gain an extra {d}",
    "climb {d} higher",
    "take it up another {d}",
    "move up by {d}",
]
ASCEND_BARE = [
    "climb",
    "go up",
    "ascend",
    "gain altitude",
    "go higher",
    "climb a bit",
    "go up a little",
    "a bit higher",
    "gain some altitude",
    "fly higher",
    "move up",
    "raise the drone",
    "climb a little",
    "go up a bit",
    "get higher",
    "take it up a bit",
    "climb up a little",
    "gain a bit of altitude",
]

# ---- descend ------------------------------------------------------------
DESCEND = [
    "descend {d}",
    "drop {d}",
    "lower {d}",
    "go down {d}",
    "come down {d}",
    "lose {d}",
    "lose {d} of altitude",
    "decrease altitude by {d}",
    "reduce altitude by {d}",
    "drop altitude by {d}",
    "lower altitude by {d}",
    "sink {d}",
    "go {d} lower",
    "fly {d} lower",
    "get {d} lower",
    "down {d}",
    "drop down {d}",
    "bring it down {d}",
    "lower the drone {d}",
    "descend by {d}",
    "move down {d}",
    "drop another {d}",
    "take it down {d}",
    "come down another {d}",
    "decrease height by {d}",
    "go down another {d}",
    "drop down by {d}",
    "come down by {d}",
    "sink down {d}",
    "decrease your altitude by {d}",
    "bring it down by {d}",
    "lower the drone by {d}",
    "descend {d} slowly",
    "lose {d} in height",
    "go down by {d}",
    "drop {d} lower",
]
DESCEND_BARE = [
    "descend",
    "go down",
    "come down a bit",
    "drop a little",
    "lower",
    "go lower",
    "lose some altitude",
    "drop down",
    "move down",
    "come down a little",
    "descend slowly",
    "lower the drone",
    "go down a bit",
    "drop a bit",
    "get lower",
    "go a little lower",
    "bring it down a bit",
    "descend a little",
]

# ---- unknown ------------------------------------------------------------
CHITCHAT = [
    "hello",
    "hi there",
    "how are you",
    "thanks",
    "good job",
    "what's your name",
    "tell me a joke",
    "what time is it",
    "what's the weather like",
    "who made you",
    "nice flying",
    "are you there",
    "i like drones",
    "what can you do",
    "good morning",
    "how high can you fly",
    "you're doing great",
    "thank you drone",
    "is it going to rain",
    "what day is it",
    "hello drone",
    "how are you today",
    "how's it going",
    "good morning drone",
    "tell me about drones",
    "you are a good drone",
    "thanks for the help",
]
OUT_OF_SCOPE = [
    "take a photo",
    "take a picture",
    "start recording",
    "stop recording",
    "turn on the camera",
    "zoom in",
    "turn left",
    "turn right 90 degrees",
    "rotate 180 degrees",
    "yaw left",
    "fly forward 20 meters",
    "move left 5 m",
    "strafe right",
    "set speed to 10 m/s",
    "speed up",
    "slow down",
    "what's the battery level",
    "check the battery",
    "show me the map",
    "play music",
    "send me the video",
    "do a flip",
    "do a barrel roll",
    "follow me",
    "track that person",
    "open the gripper",
    "release the payload",
    "calibrate the compass",
    "arm the motors",
    "update the firmware",
    "turn on the lights",
    "fly backward 10 meters",
    "point the camera down",
    "save a waypoint here",
    "add a new waypoint",
    "scan the field",
    "map the area",
]
# Parameterised out-of-scope requests (filled by _Builder.out_of_scope).
OUT_OF_SCOPE_TPL = [
    "turn {side} {deg} degrees",
    "rotate {side} {deg} degrees",
    "yaw {side} {deg} degrees",
    "turn around {deg} degrees",
    "fly {dir} {d}",
    "move {dir} {d}",
    "go {dir} {d}",
    "strafe {side} {d}",
    "set speed to {n} m/s",
    "fly at {n} meters per second",
    "take a {shot} of {thing}",
    "record a video of {thing}",
    "point the camera at {thing}",
    "what's the battery level now",
    "how much battery is left",
    "follow {thing}",
    "scan {thing}",
]
SIDES = ["left", "right"]
DIRECTIONS = ["forward", "backward", "left", "right", "sideways", "north", "south", "east", "west"]
SHOTS = ["photo", "picture", "video", "panorama"]
THINGS = [
    "the field",
    "the tower",
    "the house",
    "the river",
    "that car",
    "the roof",
    "the crowd",
    "the road",
    "me",
    "the trees",
]
UNSAFE = [
    "fly over the crowd",
    "kill the motors",
    "cut the motors mid-air",
    "turn off the motors now",
    "disable the geofence",
    "ignore the no-fly zone",
    "fly into the airport",
    "turn off obstacle avoidance",
    "fly into that building",
    "chase that car",
    "drop the payload on the people",
    "fly as high as you can",
    "fly at full speed into the trees",
    "land on the highway",
    "land on that car",
    "crash the drone",
    "fly over the stadium",
    "fly beyond visual line of sight",
    "fly through the window",
    "hit that bird",
    "fly into the storm",
    "disable the return home failsafe",
    "drop down onto the crowd",
    "fly over the highway traffic",
    "switch off all safety limits",
    "kill the motors in flight",
    "disable the geofence and keep flying",
    "fly over the people",
    "fly over the airport",
    "fly low over the crowd",
    "turn off the motors in the air",
    "ignore the safety limits",
]
AMBIGUOUS = [
    "go",
    "do it",
    "move",
    "fly somewhere",
    "go to the waypoint",
    "fly there",
    "do the thing",
    "you know what to do",
    "up or down, whatever",
    "land or hover, your choice",
    "fly to the next one",
    "not sure, do something",
    "hmm",
    "uh",
    "???",
    "never mind",
    "cancel",
    "don't land",
    "don't go home yet",
    "do not take off",
    "don't climb",
    "go over there",
    "fly to that place",
    "wait, what",
    "go to it",
    "climb or descend, I don't know",
    "do what you did before",
    "fly somewhere",
    "go somewhere else",
    "move over there",
    "cancel that",
    "never mind, forget it",
]

# ---- hard constructions --------------------------------------------------
CONTEXTS = [
    "the battery is at 80 percent",
    "wind is picking up a little",
    "we finished scanning the field",
    "the camera is ready",
    "i can see the drone from here",
    "the area below is clear",
    "we were at bravo earlier",
    "the last flight went well",
    "there are some trees to the north",
    "okay, new plan",
    "the inspection is done",
    "visibility is good today",
    "we are about to start",
    "the crowd has left the field",
    "you landed at delta yesterday",
    "last time you climbed too fast",
    "the photos from echo look great",
    "the survey of charlie is complete",
    "it's getting dark",
    "rain is coming in",
    "the operator is ready",
    "traffic on the road has cleared",
    "we have ten minutes of battery left",
    "good job on that last pass",
    "the wind has calmed down",
    "the team is watching from the tower",
    "that was a nice takeoff",
    "the field is clear of people",
    "we need a better view",
    "the battery is getting low",
    "we're done here",
    "the survey is complete",
    "the wind is picking up",
    "we're done for today",
    "the camera is ready now",
    "we were at {wp} earlier",
    "the photos from {wp} look good",
    "there are tall trees to the north",
    "it looks clear",
]
CONTEXT_JOINS = [
    "{c}. {i}",
    "{c}, so {i}",
    "{c} - {i}",
    "{c}. now {i}",
    "{c}; {i}",
    "{c}. ok, {i}",
    "{c}, {i}",
    "{i}, {c}",
    "{i}. {c}",
]

NEG_PHRASES = {
    "takeoff": ["take off", "launch", "take off yet"],
    "land": ["land", "land yet", "touch down"],
    "goto_waypoint": ["go to {wp}", "fly to {wp}", "head to {wp}"],
    "rtl": ["go home", "return to launch", "come back yet", "return home"],
    "hover": ["hover", "hold position", "stay put"],
    "loiter": ["circle", "loiter", "orbit"],
    "ascend": ["climb", "go up", "ascend"],
    "descend": ["descend", "go down", "drop"],
}
CANCEL_NOUNS = {
    "takeoff": ["takeoff", "launch"],
    "land": ["landing"],
    "goto_waypoint": ["trip to {wp}", "route"],
    "rtl": ["return", "return to launch"],
    "hover": ["hover", "hold"],
    "loiter": ["orbit", "loiter"],
    "ascend": ["climb"],
    "descend": ["descent"],
}
NEG_FORMS = [
    "don't {neg}, {i}",
    "don't {neg}, just {i}",
    "do not {neg}. {i} instead",
    "no, don't {neg}. {i}",
    "{i}, don't {neg}",
    "{i}. do not {neg}",
    "no need to {neg}, {i}",
    "don't {neg}; {i}",
]
CANCEL_FORMS = [
    "cancel the {noun} and {i}",
    "forget the {noun}, {i}",
    "never mind the {noun}. {i}",
    "abort the {noun} and {i}",
]
CORRECTION_FORMS = [
    "{o}... no wait, {i}",
    "{o}. actually, {i}",
    "{o}, sorry, i mean {i}",
    "{o}. scratch that, {i}",
    "{o} - correction: {i}",
    "{o}. no, {i} instead",
    "{o}, no, {i}",
]

_PROTECTED = set(WAYPOINTS) | {"home", "pad"} | set(_NUMBER_WORD_TOKENS)
for _p in BOGUS_PLACES:
    _PROTECTED.update(_p.split())


# --------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------
class _Builder:
    """Renders one example; tracks which variations made it harder."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.medium = False
        self.hard = False

    def pick(self, seq):
        return self.rng.choice(seq)

    # -- numbers / units ---------------------------------------------------
    def num(self, n: int) -> tuple[str, bool]:
        if n in NUM_WORDS and self.rng.random() < 0.25:
            self.medium = True
            return self.pick(NUM_WORDS[n]), True
        return str(n), False

    def dist(self, values, feet_values=None, feet_p=0.12) -> tuple[str, int]:
        """Noun form: '10 meters', '10m', '30 ft' -> (text, meters)."""
        if feet_values and self.rng.random() < feet_p:
            ft = self.pick(feet_values)
            self.medium = True
            s, word = self.num(ft)
            unit = self.pick([" feet", " ft", " feet"] if word else [" feet", " ft", "ft", " feet"])
            return s + unit, feet_to_m(ft)
        m = self.pick(values)
        s, word = self.num(m)
        if m == 1:
            unit = self.pick([" meter", " metre", " m"])
        elif word:
            unit = self.pick([" meters", " metres", " meters", " m"])
        else:
            unit = self.pick([" m", "m", " meters", " metres", " meters", " m", " meters"])
        return s + unit, m

    def dist_adj(self, values, feet_values=None, feet_p=0.1) -> tuple[str, int]:
        """Adjective form: '15 meter', '15-meter', '15 m' -> (text, meters)."""
        if feet_values and self.rng.random() < feet_p:
            ft = self.pick(feet_values)
            self.medium = True
            s, _ = self.num(ft)
            return s + self.pick([" foot", "-foot", " ft"]), feet_to_m(ft)
        m = self.pick(values)
        s, word = self.num(m)
        unit = self.pick(
            [" meter", "-meter", " metre", " m"] if word else [" meter", "-meter", " m", "m", " metre"]
        )
        return s + unit, m

    def dur(self, values) -> tuple[str, int]:
        r = self.rng.random()
        if r < 0.05:
            self.medium = True
            return self.pick(["half a minute", "thirty seconds"]), 30
        if r < 0.25:
            mins = self.pick(MINUTE_VALUES)
            self.medium = True
            if mins == 1:
                return self.pick(["a minute", "one minute", "1 minute", "1 min"]), 60
            s, _ = self.num(mins)
            return s + self.pick([" minutes", " min", " mins", " minutes"]), mins * 60
        sec = self.pick(values)
        s, word = self.num(sec)
        if word:
            unit = self.pick([" seconds", " secs", " seconds"])
        else:
            unit = self.pick([" seconds", " secs", " sec", "s", " s", " seconds", " seconds"])
        return s + unit, sec

    def waypoint(self, name: str) -> str:
        if name == "home_pad":
            return self.pick(["home_pad", "home pad", "the home pad", "the home_pad", "home_pad waypoint"])
        return self.pick(
            [
                name,
                name,
                name,
                f"waypoint {name}",
                f"{name} waypoint",
                f"point {name}",
                f"wp {name}",
                f"the {name} waypoint",
                name.capitalize(),
            ]
        )

    # -- per-command base instructions: return (text, args) -----------------
    def takeoff(self, values=None, allow_default=True, feet_values=FEET_VALUES):
        if allow_default and values is None and self.rng.random() < 0.25:
            return self.pick(TAKEOFF_BARE), {"altitude_m": DEFAULT_TAKEOFF_ALT_M}
        alt, m = self.dist(values or TAKEOFF_ALTS, feet_values)
        return self.pick(TAKEOFF_ALT).format(alt=alt), {"altitude_m": m}

    def land(self):
        return self.pick(LAND), {}

    def goto_waypoint(self, name=None):
        name = name or self.pick(WAYPOINTS)
        templates = GOTO + (GOTO_HOME_PAD_EXTRA if name == "home_pad" else [])
        return self.pick(templates).format(wp=self.waypoint(name)), {"waypoint": name}

    def rtl(self):
        return self.pick(RTL), {}

    def hover(self):
        if self.rng.random() < 0.35:
            return self.pick(HOVER_BARE), {"duration_s": DEFAULT_HOVER_S}
        d, s = self.dur(HOVER_SECONDS)
        return self.pick(HOVER_DUR).format(dur=d), {"duration_s": s}

    def loiter(self):
        r = self.rng.random()
        radius, secs = DEFAULT_LOITER_RADIUS_M, DEFAULT_LOITER_S
        if r < 0.15:
            text = self.pick(LOITER_BARE)
        elif r < 0.40:
            tpl = self.pick(LOITER_R)
            if "{ra}" in tpl:
                ra, radius = self.dist_adj(LOITER_RADII, FEET_STEP_VALUES, 0.08)
                text = tpl.format(ra=ra)
            else:
                rn, radius = self.dist(LOITER_RADII, FEET_STEP_VALUES, 0.08)
                text = tpl.format(r=rn)
        elif r < 0.60:
            d, secs = self.dur(LOITER_SECONDS)
            text = self.pick(LOITER_D).format(dur=d)
        else:
            tpl = self.pick(LOITER_RD)
            d, secs = self.dur(LOITER_SECONDS)
            if "{ra}" in tpl:
                ra, radius = self.dist_adj(LOITER_RADII, FEET_STEP_VALUES, 0.08)
                text = tpl.format(ra=ra, dur=d)
            else:
                rn, radius = self.dist(LOITER_RADII, FEET_STEP_VALUES, 0.08)
                text = tpl.format(r=rn, dur=d)
        return text, {"radius_m": radius, "duration_s": secs}

    def ascend(self, values=None, allow_default=True, feet_values=FEET_STEP_VALUES):
        if allow_default and values is None and self.rng.random() < 0.15:
            return self.pick(ASCEND_BARE), {"meters": DEFAULT_STEP_M}
        d, m = self.dist(values or STEP_VALUES, feet_values)
        return self.pick(ASCEND).format(d=d), {"meters": m}

    def descend(self, values=None, allow_default=True, feet_values=FEET_STEP_VALUES):
        if allow_default and values is None and self.rng.random() < 0.15:
            return self.pick(DESCEND_BARE), {"meters": DEFAULT_STEP_M}
        d, m = self.dist(values or STEP_VALUES, feet_values)
        return self.pick(DESCEND).format(d=d), {"meters": m}

    def base(self, cmd):
        return getattr(self, cmd)()

    def unknown(self):
        r = self.rng.random()
        if r < 0.18:
            return self.pick(CHITCHAT), {}
        self.medium = True
        if r < 0.30:
            return self.pick(OUT_OF_SCOPE), {}
        if r < 0.42:
            return self.out_of_scope(), {}
        self.hard = True
        if r < 0.62:
            return self.pick(UNSAFE), {}
        if r < 0.78:
            return self.pick(AMBIGUOUS), {}
        if r < 0.90:
            # numeric amount above the safety limit
            kind = self.pick(["takeoff", "ascend", "descend"])
            fn = getattr(self, kind)
            if self.rng.random() < 0.2:
                text, _ = fn(values=[self.pick(OVER_LIMIT_FT)], allow_default=False, feet_values=None)
                unit = self.pick(["feet", "ft"])
                text = re.sub(r"(\d+)\s?(m|meters|metres|meter)\b", r"\1 " + unit, text)
                text = re.sub(r"(thousand|hundred)\s(m|meters|metres|meter)\b", r"\1 " + unit, text)
            else:
                text, _ = fn(values=OVER_LIMIT_M, allow_default=False, feet_values=None)
            return text, {}
        # waypoint that is not on the list
        place = self.pick(BOGUS_PLACES)
        return self.pick(GOTO).format(wp=place), {}

    def out_of_scope(self):
        tpl = self.pick(OUT_OF_SCOPE_TPL)
        d, _ = self.dist(STEP_VALUES) if "{d}" in tpl else ("", 0)
        return tpl.format(
            side=self.pick(SIDES),
            deg=self.pick([15, 30, 45, 90, 180, 360]),
            dir=self.pick(DIRECTIONS),
            d=d,
            n=self.pick([2, 5, 8, 10, 15]),
            shot=self.pick(SHOTS),
            thing=self.pick(THINGS),
        )

    # -- hard constructions --------------------------------------------------
    def other_cmd(self, cmd):
        return self.pick([c for c in COMMANDS if c not in (cmd, "unknown")])

    def harden(self, cmd, text):
        self.hard = True
        kind = self.rng.random()
        if kind < 0.35:  # context sentence before the instruction
            ctx = self.pick(CONTEXTS).format(wp=self.pick(WAYPOINTS))
            return self.pick(CONTEXT_JOINS).format(c=ctx, i=text)
        if kind < 0.65:  # negated other command
            other = self.other_cmd(cmd)
            wp = self.pick(WAYPOINTS)
            if self.rng.random() < 0.75:
                neg = self.pick(NEG_PHRASES[other]).format(wp=wp)
                return self.pick(NEG_FORMS).format(neg=neg, i=text)
            noun = self.pick(CANCEL_NOUNS[other]).format(wp=wp)
            return self.pick(CANCEL_FORMS).format(noun=noun, i=text)
        # correction: an earlier instruction, then the one that counts
        other = cmd if self.rng.random() < 0.3 else self.other_cmd(cmd)
        saved = (self.medium, self.hard)
        otext, _ = self.base(other)
        self.medium, self.hard = saved[0] or self.medium, True
        return self.pick(CORRECTION_FORMS).format(o=otext, i=text)

    # -- surface noise -------------------------------------------------------
    def typo(self, text):
        words = text.split(" ")
        idx = [i for i, w in enumerate(words) if re.fullmatch(r"[a-z]{4,}", w) and w not in _PROTECTED]
        if not idx:
            return text
        i = self.pick(idx)
        w = words[i]
        k = self.rng.randrange(1, len(w) - 1)  # keep the first letter intact
        op = self.rng.randrange(3)
        if op == 0:
            w = w[:k] + w[k + 1] + w[k] + w[k + 2 :]
        elif op == 1:
            w = w[:k] + w[k + 1 :]
        else:
            w = w[:k] + w[k] + w[k:]
        if w != words[i]:
            words[i] = w
            self.hard = True
        return " ".join(words)

    def decorate(self, text, allow_prefix=True):
        rng = self.rng
        if rng.random() < 0.08:
            text = self.typo(text)
        if allow_prefix and rng.random() < 0.35:
            if text.startswith(NONVERB_STARTS):
                pre = self.pick(VOCATIVE_PREFIXES)
            else:
                pre = self.pick(PREFIXES)
                if pre in ("go ahead and ", "now ") and text.startswith(pre.strip()):
                    pre = "please "
            text = pre + text
            self.medium = True
        if rng.random() < 0.08:
            text = self.pick(FILLERS) + text
            self.medium = True
        if rng.random() < 0.25:
            text = text + self.pick(SUFFIXES)
            self.medium = True
        if rng.random() < 0.3:
            text = text + self.pick(
                [".", ".", "!", "?"] if text.startswith(("could", "can", "would")) else [".", ".", "!"]
            )
        c = rng.random()
        if c < 0.05:
            text = text.upper()
            self.medium = True
        elif c < 0.09:
            text = text.title()
            self.medium = True
        elif c < 0.30:
            text = text[:1].upper() + text[1:]
        return re.sub(r"\s+", " ", text).strip()

    def difficulty(self):
        return "hard" if self.hard else ("medium" if self.medium else "easy")


def _example(rng: random.Random, cmd: str) -> dict:
    b = _Builder(rng)
    if cmd == "unknown":
        text, args = b.unknown()
        text = b.decorate(text)
    else:
        text, args = b.base(cmd)
        if rng.random() < 0.22:
            text = b.harden(cmd, text)
            text = b.decorate(text, allow_prefix=False)
        else:
            text = b.decorate(text)
    return {
        "messages": [
            {"role": "user", "content": text},
            {"role": "assistant", "content": to_json(cmd, args)},
        ],
        "meta": {"category": cmd, "source": "generate", "difficulty": b.difficulty()},
    }


def generate(n: int, *, seed: int = 0, focus: list[str] | None = None) -> list[dict]:
    """Return `n` examples, deterministic for a given seed.

    `focus` restricts the categories generated to the given command names
    (spread evenly over them); None means all nine commands, evenly.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    cats = list(COMMANDS)
    if focus:
        bad = [c for c in focus if c not in COMMANDS]
        if bad:
            raise ValueError(f"unknown focus categories {bad}; allowed: {COMMANDS}")
        cats = [c for c in COMMANDS if c in focus]
    rng = random.Random(seed)
    plan = [cats[i % len(cats)] for i in range(n)]
    rng.shuffle(plan)
    return [_example(rng, cmd) for cmd in plan]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate drone-router examples as JSONL.")
    ap.add_argument("--n", type=int, default=500, help="number of examples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--focus", default="", help="comma-separated categories, e.g. hover,loiter")
    ap.add_argument("--output", default="-", help="output JSONL file (default: stdout)")
    a = ap.parse_args(argv)
    focus = [c.strip() for c in a.focus.split(",") if c.strip()] or None
    try:
        rows = generate(a.n, seed=a.seed, focus=focus)
    except ValueError as e:
        ap.error(str(e))
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if a.output == "-":
        sys.stdout.write(lines)
    else:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
