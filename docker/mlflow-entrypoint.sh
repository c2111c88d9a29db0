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
umask 077
cat > /auth/basic_auth.ini <<INI
[mlflow]
default_permission = READ
database_uri = sqlite:////auth/basic_auth.db
admin_username = ${MLFLOW_ADMIN_USER}
admin_password = ${MLFLOW_ADMIN_PASSWORD}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
export MLFLOW_AUTH_CONFIG_PATH=/auth/basic_auth.ini
exec mlflow server --app-name basic-auth \
    --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" \
    --artifacts-destination /mlartifacts --serve-artifacts \
    --host 0.0.0.0 --port 5000
