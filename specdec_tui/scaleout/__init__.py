"""specdec-serve --ray: engine replicas behind one OpenAI endpoint, on Ray Serve.

A thin front deployment takes every HTTP request, picks the replica that holds the conversation's
KV cache (``routing``) and forwards the request whole; each replica runs the single-process server's
own FastAPI app in process (``asgi``) on its own loaded pair. Replicas post their health and metrics
to a board actor, which the front reads for ``/health`` and ``/metrics``.

This module imports nothing from Ray, so the load tool can name the header below without it.
"""

#: The response header that names the replica that answered.
REPLICA_HEADER = "x-specdec-replica"
