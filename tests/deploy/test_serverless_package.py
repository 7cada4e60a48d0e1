"""`serverless package` (the pinned v3) on serverless.yml and the bundle `make bundle` builds:
the CloudFormation template it writes is what `serverless deploy` would send.

It runs offline: packaging resolves the variables and compiles the template without calling
AWS (dummy credentials; proxies pointed at a closed loopback port catch any attempt). Where it
stops: `serverless deploy` needs an AWS account."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from aircoach.settings import ROOT
from tests.deploy.conftest import npm_tool
from tests.helpers import load_serverless_yml
from tests.loopback import free_port

pytestmark = pytest.mark.integration

LAYER = re.compile(r"arn:aws:lambda:eu-west-1:753240598075:layer:LambdaAdapterLayerX86:\d+")


def _package(tmp_path: Path, bundle: Path, **variables: str) -> tuple[dict[str, Any], str]:
    """Package a copy of the service (serverless.yml, the bundle as dist/aircoach-lambda.zip),
    so nothing is written to the work tree; returns the template and the output."""
    service = tmp_path / "service"
    (service / "dist").mkdir(parents=True)
    shutil.copy2(ROOT / "serverless.yml", service / "serverless.yml")
    (service / "dist" / "aircoach-lambda.zip").symlink_to(bundle)
    closed = f"http://127.0.0.1:{free_port()}"
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKEFAKE",
        "AWS_SECRET_ACCESS_KEY": "fake",
        "AWS_REGION": "eu-west-1",
        "SLS_TELEMETRY_DISABLED": "1",
        "SLS_NOTIFICATIONS_MODE": "off",
        "HTTP_PROXY": closed,
        "HTTPS_PROXY": closed,
        **variables,
    }
    result = subprocess.run(
        [str(npm_tool("serverless")), "package", "--package", str(tmp_path / "out")],
        cwd=service,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    template = json.loads(
        (tmp_path / "out" / "cloudformation-template-update-stack.json").read_text()
    )
    return template, output


def test_the_packaged_template_streams_through_the_web_adapter(tmp_path, lambda_bundle):
    origins = "https://app.example,https://admin.example"
    template, output = _package(
        tmp_path,
        lambda_bundle,
        AUTH0_DOMAIN="tenant.example",
        PROMPT_BUCKET="aircoach-docs",
        CORS_ORIGINS=origins,
        MONGODB_URI="mongodb+srv://u:p@cluster.example/db",
    )
    print("\n" + "\n".join(line for line in output.splitlines() if line.strip()))
    resources = template["Resources"]

    stream = resources["StreamLambdaFunction"]["Properties"]
    assert stream["Handler"] == "run.sh" and stream["Runtime"] == "python3.12"
    assert [layer for layer in stream["Layers"] if LAYER.fullmatch(layer)] == stream["Layers"]
    assert len(stream["Layers"]) == 1
    variables = stream["Environment"]["Variables"]
    assert (
        variables
        | {
            "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
            "AWS_LWA_INVOKE_MODE": "response_stream",
            "AWS_LWA_READINESS_CHECK_PATH": "/api/health",
            "PORT": "8080",
            "AWS_LWA_PORT": "8080",
        }
        == variables
    )
    # Every setting passed as before: the provider's environment, resolved.
    settings = load_serverless_yml()["provider"]["environment"]
    assert set(settings) <= set(variables)
    assert variables["AUTH0_DOMAIN"] == "tenant.example" and variables["CORS_ORIGINS"] == origins
    assert variables["TURN_TIMEOUT_S"] == ""  # the app's default (45 s): no gateway here
    assert stream["Timeout"] > 45 + 5

    url = resources["StreamLambdaFunctionUrl"]["Properties"]
    assert url["InvokeMode"] == "RESPONSE_STREAM" and url["AuthType"] == "NONE"
    assert url["TargetFunctionArn"] == {"Fn::GetAtt": ["StreamLambdaFunction", "Arn"]}
    cors = url["Cors"]
    assert cors["AllowOrigins"] == {"Fn::Split": [",", origins]}
    assert {"authorization", "content-type", "idempotency-key"} <= set(cors["AllowHeaders"])
    assert "x-turn-id" in cors["ExposeHeaders"]
    assert (
        "StreamLambdaFunctionUrl"
        in template["Outputs"]["StreamLambdaFunctionUrl"]["Value"]["Fn::GetAtt"]
    )

    # The handler is in the zip the template ships, executable.
    assert stream["Code"]["S3Key"].endswith("/aircoach-lambda.zip")
    with zipfile.ZipFile(lambda_bundle) as bundle:
        assert (bundle.getinfo(stream["Handler"]).external_attr >> 16) & 0o111
        assert "functions/tasks_worker.py" in bundle.namelist()

    # The gateway function is opt-in; the tasks worker stays.
    assert "ApiLambdaFunction" not in resources and "HttpApi" not in resources
    worker = resources["TasksWorkerLambdaFunction"]["Properties"]
    assert worker["Handler"] == "functions/tasks_worker.handler"


def test_the_optional_gateway_function_caps_its_turns_at_25_seconds(tmp_path, lambda_bundle):
    template, _ = _package(
        tmp_path,
        lambda_bundle,
        AUTH0_DOMAIN="tenant.example",
        PROMPT_BUCKET="aircoach-docs",
        API_GATEWAY="true",
    )
    resources = template["Resources"]
    api = resources["ApiLambdaFunction"]["Properties"]
    assert api["Handler"] == "functions/chat.handler"
    assert api["Environment"]["Variables"]["TURN_TIMEOUT_S"] == "25"
    assert api["Timeout"] <= 30
    assert resources["HttpApiRouteDefault"]["Properties"]["RouteKey"] == "$default"
    assert "StreamLambdaFunctionUrl" in resources  # the streaming function is deployed too
    print(f"\nwith API_GATEWAY=true: {sorted(r for r in resources if 'Lambda' in r)}")
