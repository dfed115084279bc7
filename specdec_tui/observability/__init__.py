"""Listeners on the engine's event stream (OpenTelemetry, MLflow) and the bench's rows.

Nothing here is imported by the engine, and neither OpenTelemetry nor MLflow is imported unless
its setting turns it on.
"""
