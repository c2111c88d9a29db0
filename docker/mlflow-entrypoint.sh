#!/bin/sh
# Starts `mlflow server` with basic authentication. The admin password comes from the environment
# and must be set: MLflow's built-in default ("password1234") is never left in place.
set -eu
: "${MLFLOW_BACKEND_STORE_URI:?set the PostgreSQL URI}"
: "${MLFLOW_ADMIN_USER:?set MLFLOW_ADMIN_USER in docker/.env}"
: "${MLFLOW_ADMIN_PASSWORD:?set MLFLOW_ADMIN_PASSWORD in docker/.env}"
if [ "$MLFLOW_ADMIN_PASSWORD" = "password1234" ] || [ ${#MLFLOW_ADMIN_PASSWORD} -lt 12 ]; then
    echo "MLFLOW_ADMIN_PASSWORD: choose a password of 12 or more characters (not MLflow's default)" >&2
    exit 1
fi
AUTH_DIR="${MLFLOW_AUTH_DIR:-/auth}"              # the users database and this config (a volume)
ARTIFACTS_DIR="${MLFLOW_ARTIFACTS_DIR:-/mlartifacts}"
umask 077
cat > "$AUTH_DIR/basic_auth.ini" <<INI
[mlflow]
default_permission = READ
database_uri = sqlite:///$AUTH_DIR/basic_auth.db
admin_username = ${MLFLOW_ADMIN_USER}
admin_password = ${MLFLOW_ADMIN_PASSWORD}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
export MLFLOW_AUTH_CONFIG_PATH="$AUTH_DIR/basic_auth.ini"
# The auth app's CSRF protection needs a fixed secret key: from the environment (set the same one on
# every replica), else one generated on first start and kept in the auth volume.
if [ -z "${MLFLOW_FLASK_SERVER_SECRET_KEY:-}" ]; then
    if [ ! -s "$AUTH_DIR/flask_secret_key" ]; then
        od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$AUTH_DIR/flask_secret_key"
    fi
    MLFLOW_FLASK_SERVER_SECRET_KEY="$(cat "$AUTH_DIR/flask_secret_key")"
    export MLFLOW_FLASK_SERVER_SECRET_KEY
fi
# MLflow's job runner (a huey consumer) serves its GenAI jobs; forge-ml submits none.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"
exec mlflow server --app-name basic-auth \
    --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" \
    --artifacts-destination "$ARTIFACTS_DIR" --serve-artifacts \
    --host "${MLFLOW_HOST:-0.0.0.0}" --port "${MLFLOW_PORT:-5000}"
