"""An OTLP receiver for tether's telemetry tests, on the official OpenTelemetry protobuf
definitions (PyPI's opentelemetry-proto) and grpcio: the three OTLP encodings a collector
accepts, gRPC, HTTP with protobuf bodies and HTTP with the specification's JSON encoding
(camelCase fields, trace and span ids in hex).

Usage: receiver.py OUT [--mode ok|error|hang]
Listens on 127.0.0.1 with ports the system picks, prints one line
`receiver: http=http://127.0.0.1:P grpc=http://127.0.0.1:Q` once both listen, and appends one
JSON line to OUT per span and per metric received:
  {"signal": "span", "protocol": ..., "service": ..., "name": ..., "trace_id": hex,
   "span_id": hex, "parent_span_id": hex, "kind": int, "status": int,
   "attributes": {...}, "events": [{"name": ..., "attributes": {...}}]}
  {"signal": "metric", "protocol": ..., "service": ..., "name": ..., "points": int}
`--mode error` answers every export with a failure (HTTP 503, gRPC UNAVAILABLE) and
records nothing; `--mode hang` accepts every export and never answers. Runs until killed.
"""

import argparse
import base64
import json
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

LOCK = threading.Lock()
ARGS = None
HANG = threading.Event()


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(any_value, kind)
    if kind == "array_value":
        return [value_of(v) for v in value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.values}
    if kind == "bytes_value":
        return value.hex()
    return value


def attributes_of(attributes):
    return {kv.key: value_of(kv.value) for kv in attributes}


def service_of(resource):
    return attributes_of(resource.attributes).get("service.name")


def record(lines):
    with LOCK, open(ARGS.out, "a", encoding="utf-8") as out:
        for line in lines:
            out.write(json.dumps(line) + "\n")


def spans_of(request, protocol):
    lines = []
    for resource_spans in request.resource_spans:
        service = service_of(resource_spans.resource)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                lines.append({
                    "signal": "span",
                    "protocol": protocol,
                    "service": service,
                    "name": span.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "kind": span.kind,
                    "status": span.status.code,
                    "attributes": attributes_of(span.attributes),
                    "events": [
                        {"name": e.name, "attributes": attributes_of(e.attributes)}
                        for e in span.events
                    ],
                })
    return lines


def metrics_of(request, protocol):
    lines = []
    for resource_metrics in request.resource_metrics:
        service = service_of(resource_metrics.resource)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                data = metric.WhichOneof("data")
                points = len(getattr(metric, data).data_points) if data else 0
                lines.append({"signal": "metric", "protocol": protocol,
                              "service": service, "name": metric.name, "points": points})
    return lines


ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids_to_base64(node):
    """OTLP/JSON writes ids in hex; protobuf's JSON mapping reads bytes as base64."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            hex_ids_to_base64(item)
    return node


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if ARGS.mode == "hang":
            HANG.wait()
            return
        if ARGS.mode == "error":
            self.answer(503, b"")
            return
        paths = {
            "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, spans_of,
                           trace_service_pb2.ExportTraceServiceResponse),
            "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_of,
                            metrics_service_pb2.ExportMetricsServiceResponse),
        }
        if self.path not in paths:
            self.answer(404, b"")
            return
        message_type, lines_of, response_type = paths[self.path]
        request = message_type()
        json_body = self.headers.get("Content-Type", "").startswith("application/json")
        try:
            if json_body:
                json_format.ParseDict(hex_ids_to_base64(json.loads(body)), request)
            else:
                request.ParseFromString(body)
        except Exception as error:  # a body the receiver cannot read fails the test's export
            self.answer(400, str(error).encode())
            return
        record(lines_of(request, "http/json" if json_body else "http/protobuf"))
        if json_body:
            self.answer(200, b"{}", "application/json")
        else:
            self.answer(200, response_type().SerializeToString(), "application/x-protobuf")

    def answer(self, status, body, content_type="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def grpc_outcome(context):
    if ARGS.mode == "hang":
        HANG.wait()
    if ARGS.mode == "error":
        context.abort(grpc.StatusCode.UNAVAILABLE, "receiver told to fail")


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        grpc_outcome(context)
        record(spans_of(request, "grpc"))
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        grpc_outcome(context)
        record(metrics_of(request, "grpc"))
        return metrics_service_pb2.ExportMetricsServiceResponse()


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--mode", choices=["ok", "error", "hang"], default="ok")
    ARGS = parser.parse_args()
    http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
    http.daemon_threads = True
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"receiver: http=http://127.0.0.1:{http.server_address[1]} "
          f"grpc=http://127.0.0.1:{grpc_port}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
