# An image that runs mirrorflow's DAGs: Python 3.11, a JRE for Spark, and the project
# installed exactly as the README's `make` targets install it.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven make \
 && rm -rf /var/lib/apt/lists/*

ENV AIRFLOW_HOME=/usr/local/airflow \
    MIRRORFLOW_CONFIG=/usr/local/airflow/include/config/mm2.properties \
    AIRFLOW__CORE__DAGS_FOLDER=/usr/local/airflow/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/usr/local/airflow/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    AIRFLOW__SCHEDULER__MP_START_METHOD=forkserver \
    AIRFLOW__CORE__MP_FORKSERVER_PRELOAD=mirrorflow.airflow.preload \
    GX_ANALYTICS_ENABLED=false

WORKDIR /usr/local/airflow
COPY . .
RUN make install VENV=/opt/venv PYTHON=python3.11
ENV PATH=/opt/venv/bin:$PATH \
    PYSPARK_PYTHON=/opt/venv/bin/python

CMD ["airflow", "standalone"]
