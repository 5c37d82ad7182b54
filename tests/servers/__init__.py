"""Real loopback servers (OTLP receiver, rotel collector, Prometheus) for tests.

They exist so that tests exercise the library against genuine wire protocols
instead of mocks: a bug in serialisation, compression, headers or retry
handling only shows up when real bytes cross a real socket.
"""
