# The project's one image: Airflow 3 (api-server, scheduler, dag-processor, triggerer), the
# Spark standalone master and workers, and the jobs themselves all run from it, so the driver
# and the executors always have the same Python, pyspark, delta-spark and project code.
#
#   docker build -t dataflow-lakehouse .     (docker compose up --build does this for you)

# bookworm: its OpenJDK is 17, the Java Spark 4 and Delta 4 are tested with. The JDK, not the
# JRE: its javac builds the product's S3 log store and local file system classes below.
FROM python:3.11-slim-bookworm

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    PYSPARK_PYTHON=python3 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Same uid as the official Airflow image, so volumes move between the two without chown.
# Directories that compose mounts named volumes on must exist here, owned by that user:
# a fresh volume copies its mount point's ownership from the image.
RUN useradd --create-home --uid 50000 --gid 0 dataflow \
    && mkdir -p /opt/dataflow /opt/airflow/logs /warehouse \
    && chown -R dataflow:0 /opt/dataflow /opt/airflow /warehouse
WORKDIR /opt/dataflow

# Dependencies first (their layer survives code edits), exactly the locked versions.
COPY requirements.lock ./
# The lock holds Airflow's Postgres drivers too (psycopg2-binary and asyncpg: Airflow 3 opens
# its database both ways), for docker-compose.yml and `make stack`.
RUN pip install --no-deps -r requirements.lock

COPY --chown=dataflow:0 pyproject.toml README.md ./
COPY --chown=dataflow:0 dataflow_core ./dataflow_core
COPY --chown=dataflow:0 dags ./dags
# Editable, as in development: the cache is the project's .cache/ (dataflow_core/paths.py).
RUN pip install --no-deps -e . && chown -R dataflow:0 /opt/dataflow

USER dataflow
# Resolve the Delta jars and the S3A connector's from Maven Central now, so containers start
# without network access; build the S3 log store (a warehouse on s3a:// needs it).
RUN python -m dataflow_core.spark.platform.jars && python -m dataflow_core.spark.platform.localfs \
    && python -m dataflow_core.spark.platform.logstore && python -m dataflow_core.spark.platform.s3a --fetch

ENV DATAFLOW_WAREHOUSE=/warehouse
