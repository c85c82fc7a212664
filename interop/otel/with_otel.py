"""Runs a Python peer of tether's tests with OpenTelemetry exporting: the Python SDK (mcp)
makes spans through the OpenTelemetry API and carries trace context in `params._meta`; this
installs the SDK's tracer provider, exporting each span as it ends over OTLP/HTTP to
`OTEL_EXPORTER_OTLP_ENDPOINT` (the service named by `OTEL_SERVICE_NAME`), then runs the
script.

Usage: with_otel.py SCRIPT ARGS...
"""

import runpy
import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create())
# Exported as each span ends, so a peer that is killed loses nothing already finished.
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)

script = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    provider.shutdown()
