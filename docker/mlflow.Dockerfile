# MLflow tracking server on PostgreSQL, basic authentication on (see docker/mlflow-entrypoint.sh).
#   docker build -f docker/mlflow.Dockerfile -t forge-ml:mlflow .
FROM python:3.12-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
COPY docker/constraints.txt /constraints.txt
RUN pip install -c /constraints.txt "mlflow[auth]" psycopg2-binary \
    && useradd --create-home --uid 1000 mlflow && mkdir -p /mlartifacts /auth && chown mlflow /mlartifacts /auth
COPY --chmod=0755 docker/mlflow-entrypoint.sh /usr/local/bin/mlflow-entrypoint
USER mlflow
EXPOSE 5000
ENTRYPOINT ["/usr/local/bin/mlflow-entrypoint"]
