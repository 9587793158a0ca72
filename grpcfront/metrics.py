"""The front end's Prometheus metrics, on a registry of its own (served on ``grpc.metrics_port`` when set).

- ``ttsfarm_grpc_calls_total{method, code}``: ended calls by gRPC status and the farm's error code ('' when OK);
- ``ttsfarm_grpc_first_audio_seconds{method}``: from a call's first message to its first audio sent (for text sent
  in pieces this includes the time the client took to write its first sentence);
- ``ttsfarm_grpc_audio_seconds_total{method}``: audio sent;
- ``ttsfarm_grpc_calls_in_flight{method}``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0)


class FrontMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter("ttsfarm_grpc_calls", "Ended calls by gRPC status and farm error code",
                             ("method", "status", "code"), registry=self.registry)
        self.first_audio = Histogram("ttsfarm_grpc_first_audio_seconds", "From a call's start to its first audio sent",
                                     ("method",), buckets=LATENCY_BUCKETS, registry=self.registry)
        self.audio = Counter("ttsfarm_grpc_audio_seconds", "Audio sent (seconds)", ("method",), registry=self.registry)
        self.in_flight = Gauge("ttsfarm_grpc_calls_in_flight", "Calls being served", ("method",), registry=self.registry)

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """``/metrics`` on ``port`` (a daemon thread of prometheus_client's)."""
        from prometheus_client import start_http_server

        start_http_server(port, addr=host, registry=self.registry)
