"""The SQS worker against moto's SQS: a queue with a dead-letter queue as `serverless.yml`
declares them, messages received and handed to the handler as Lambda would, partial batch
failures, poison messages ending in the DLQ after `maxReceiveCount`."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from typing import Any

import pytest

from aircoach.entry.tasks_worker import SqsTaskWorker
from aircoach.services import Services, build_task_stores
from aircoach.settings import ROOT
from aircoach.tasks.ports import RunFilter, TaskStores
from tests.helpers import load_serverless_yml
from tests.tasks.failing_stores import DownRuns, UnmarkedKeys
from tests.tasks.scripted import ScriptedTaskModels

REGION = "eu-west-1"


SERVERLESS = load_serverless_yml()
RESOURCES = SERVERLESS["resources"]["Resources"]
QUEUE = RESOURCES["TasksQueue"]["Properties"]
DLQ = RESOURCES["TasksDeadLetterQueue"]["Properties"]
MAX_RECEIVE = QUEUE["RedrivePolicy"]["maxReceiveCount"]
MAIL = {
    "subject": "Fattura di marzo",
    "from": "allievo@example.it",
    "body": "Buongiorno, non ho ricevuto la fattura di marzo. Grazie.",
}


class Queues:
    def __init__(self, client: Any):
        self.client = client
        self.dlq_url = client.create_queue(QueueName=DLQ["QueueName"])["QueueUrl"]
        dlq_arn = client.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.url = client.create_queue(
            QueueName=QUEUE["QueueName"],
            Attributes={
                "VisibilityTimeout": str(QUEUE["VisibilityTimeout"]),
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE)}
                ),
            },
        )["QueueUrl"]
        self.arn = client.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]

    def send(self, body: Any) -> str:
        text = body if isinstance(body, str) else json.dumps(body)
        return self.client.send_message(QueueUrl=self.url, MessageBody=text)["MessageId"]

    def receive(self, url: str | None = None) -> list[dict[str, Any]]:
        return self.client.receive_message(
            QueueUrl=url or self.url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            VisibilityTimeout=30,
        ).get("Messages", [])

    def event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The event Lambda's SQS poller hands the function."""
        return {
            "Records": [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": m.get("Attributes", {}),
                    "messageAttributes": {},
                    "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self.arn,
                    "awsRegion": REGION,
                }
                for m in messages
            ]
        }

    def settle(self, messages: list[dict[str, Any]], result: dict[str, Any]) -> None:
        """What the poller does with the handler's answer: delete the done messages, leave
        the failed ones to come back (here at once, instead of after the visibility timeout)."""
        failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        for m in messages:
            if m["MessageId"] in failed:
                self.client.change_message_visibility(
                    QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
            else:
                self.client.delete_message(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"])


@pytest.fixture
def sqs(aws_env) -> Any:
    import boto3
    from moto import mock_aws

    with mock_aws():
        yield Queues(boto3.client("sqs", region_name=REGION))


def worker(settings, **parts) -> SqsTaskWorker:
    return SqsTaskWorker(Services.build(settings, **parts))


def test_done_messages_are_deleted_and_poison_ones_end_in_the_dlq(sqs, settings):
    good = sqs.send({"task": "email_triage", "input": MAIL})
    not_json = sqs.send("{nope")
    unknown = sqs.send({"task": "poetry", "input": MAIL})
    invalid = sqs.send({"task": "email_triage", "input": {"from": "x", "body": ["not text"]}})
    failing = sqs.send({"task": "email_triage", "input": {**MAIL, "subject": "boh"}})
    models = ScriptedTaskModels(["nope"] * 4)  # only `failing` reaches this model

    class Route:
        async def open(self, which, *, temperature):
            return None if which == "fallback" else OfflineOr(models.primary)

    class OfflineOr:
        """The offline answer, except for the `boh` e-mail, which gets the scripted failures."""

        notice = None
        label = "route"

        def __init__(self, scripted):
            self.scripted = scripted
            self.tokens = {}

        async def generate(self, request):
            if request.prepared.payload["subject"] == "boh":
                return await self.scripted.generate(request)
            return json.dumps(request.definition.kind.offline(request.definition, request.prepared))

        async def aclose(self):
            return None

    app_worker = worker(settings, task_models=Route())
    messages = sqs.receive()
    assert len(messages) == 5
    result = app_worker.handle(sqs.event(messages))
    failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
    assert failed == {not_json, unknown, invalid}
    sqs.settle(messages, result)
    models.assert_used()

    stores = app_worker.services.task_stores
    (queued,) = _run(stores.reviews.list_items(status="open", task=None, limit=5, after=None))
    assert queued.source == "sqs" and queued.caller == "sqs" and queued.input["subject"] == "boh"

    # Redelivered until maxReceiveCount, then moved to the DLQ by SQS itself.
    for _ in range(MAX_RECEIVE - 1):
        again = sqs.receive()
        assert {m["MessageId"] for m in again} == failed
        sqs.settle(again, app_worker.handle(sqs.event(again)))
    assert sqs.receive() == []
    dead = sqs.receive(sqs.dlq_url)
    assert {m["MessageId"] for m in dead} == failed
    assert {good, failing}.isdisjoint(m["MessageId"] for m in dead)


def test_a_store_outage_redelivers_the_messages(sqs, settings):
    real = build_task_stores(settings)
    down = worker(settings, task_stores=TaskStores(DownRuns(), real.reviews, real.contacts))
    sqs.send({"task": "email_triage", "input": MAIL})
    sqs.send({"task": "email_triage", "input": MAIL})
    messages = sqs.receive()
    result = down.handle(sqs.event(messages))
    assert {f["itemIdentifier"] for f in result["batchItemFailures"]} == {
        m["MessageId"] for m in messages
    }
    assert down.handle({"Records": []}) == {"batchItemFailures": []}


def test_a_stored_run_whose_key_cannot_be_marked_is_done(sqs, settings):
    # Before, the message failed: SQS redelivered it and, once the lease ran out, it ran again.
    real = build_task_stores(settings)
    runs = UnmarkedKeys(real.runs)
    flaky = worker(settings, task_stores=TaskStores(runs, real.reviews, real.contacts))
    sqs.send({"task": "email_triage", "input": MAIL})
    messages = sqs.receive()
    assert flaky.handle(sqs.event(messages)) == {"batchItemFailures": []}
    (run,) = _run(real.runs.list_runs(RunFilter(source="sqs"), limit=10, before=None))
    assert run.origin == f"sqs:{messages[0]['MessageId']}"


def test_the_lambda_entry_runs_on_the_environment(sqs, monkeypatch, data_dir):
    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.setenv("PROMPT_DOCS_DIR", str(ROOT / "prompt_docs"))
    monkeypatch.chdir(data_dir)  # no stray .env
    sys.modules.pop("functions.tasks_worker", None)
    entry = importlib.import_module("functions.tasks_worker")
    sqs.send({"task": "email_triage", "input": MAIL})
    messages = sqs.receive()
    # Two invocations in a row, as a warm container gets them: each in a new event loop.
    assert entry.handler(sqs.event(messages), None) == {"batchItemFailures": []}
    assert entry.handler(sqs.event(messages), None) == {"batchItemFailures": []}


def _run(coro):
    return asyncio.run(coro)


def test_serverless_declares_the_worker_the_queue_and_its_dlq():
    worker_function = SERVERLESS["functions"]["tasksWorker"]
    assert worker_function["handler"] == "functions/tasks_worker.handler"
    (event,) = worker_function["events"]
    assert event["sqs"]["arn"] == {"GetAtt": "TasksQueue.Arn"}
    assert event["sqs"]["functionResponseType"] == "ReportBatchItemFailures"
    assert QUEUE["RedrivePolicy"]["deadLetterTargetArn"] == {"GetAtt": "TasksDeadLetterQueue.Arn"}
    # A message must not come back while its first delivery may still be running.
    assert QUEUE["VisibilityTimeout"] >= 6 * worker_function["timeout"]
    assert MAX_RECEIVE >= 2
