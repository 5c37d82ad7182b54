"""Reading exported telemetry back: loading OTLP/JSON, analysing it, rendering reports.

One shape for every output: a module with one ``render(...) -> str`` (or ``str | None``
for a lookup that may find nothing), a pure function of the loaded or analysed model
that keeps no state between calls and touches no file. ``summary``, ``tree``,
``lookup``, ``perfetto``, ``html``, ``compare_text``, ``compare_html``,
``compare_json`` and ``history_text``, ``history_html``, ``history_json`` are the
outputs; ``markup`` holds what they format alike (the one HTML escaper, durations,
shares, tables); ``cli`` (with ``history_cli``) is the only code that parses
arguments, reads the files and writes the outputs.
"""
