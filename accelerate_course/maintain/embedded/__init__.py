"""The embedded default's builders and the trace of its checkpoint's build: maintainers' code."""
