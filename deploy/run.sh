#!/bin/sh
# The streaming chat function's handler (serverless.yml, `stream`): `make bundle` puts this
# script at the root of the zip. The Lambda Web Adapter layer (AWS_LAMBDA_EXEC_WRAPPER=
# /opt/bootstrap) runs it at cold start, waits until GET /api/health answers on $PORT, then
# forwards each Function URL request to the server and streams its response back.
#
# The zip's root (LAMBDA_TASK_ROOT on Lambda) holds the app and its wheels; the runtime's own
# folder (LAMBDA_RUNTIME_DIR) comes after it, for boto3, which the bundle leaves out.
set -eu
root=$(cd "$(dirname "$0")" && pwd)
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}${LAMBDA_RUNTIME_DIR:+:$LAMBDA_RUNTIME_DIR}"
export PYTHONPATH
exec python3 -m aircoach serve --host 127.0.0.1 --port "${PORT:-8080}"
