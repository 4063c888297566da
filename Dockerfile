# recruiter's processes in a container: `recruiter run`, `recruiter worker`, `recruiter clean`.
# Build your application's image FROM this one (or pip install recruiter into yours) so that
# `recruiter worker --app yourapp.jobs:registry` can import your workables.
FROM python:3.12-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY recruiter ./recruiter
RUN pip install --no-cache-dir . && useradd --system --uid 10001 recruiter
USER recruiter
CMD ["recruiter", "--help"]
