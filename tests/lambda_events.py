"""API Gateway HTTP API (payload v2.0) events, as Lambda hands them to the Mangum handler."""

from __future__ import annotations

import base64
import json
from typing import Any


def http_api_event(
    path: str, *, method: str = "POST", token: str | None = None, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    headers = {
        "content-type": "application/json",
        "host": "abc.execute-api.eu-west-1.amazonaws.com",
    }
    if token:
        headers["authorization"] = f"Bearer {token}"
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc",
            "domainName": "abc.execute-api.eu-west-1.amazonaws.com",
            "domainPrefix": "abc",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "pytest",
            },
            "requestId": "req",
            "routeKey": "$default",
            "stage": "$default",
            "time": "22/Nov/2026:10:00:00 +0000",
            "timeEpoch": 1795000000000,
        },
        "body": json.dumps(body) if body is not None else None,
        "isBase64Encoded": False,
    }


def chat_event(token: str, query: str) -> dict[str, Any]:
    return http_api_event("/api/stream_query", token=token, body={"query": query})


def response_body(response: dict[str, Any]) -> str:
    body = response["body"]
    return base64.b64decode(body).decode() if response.get("isBase64Encoded") else body
