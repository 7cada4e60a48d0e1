"""AWS Lambda entry (API Gateway HTTP API or Function URL), buffered through Mangum."""

from mangum import Mangum

from aircoach.app import create_app

handler = Mangum(create_app(), lifespan="off")
