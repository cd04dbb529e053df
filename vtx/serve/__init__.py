"""`vtx serve`: translation (and parsing) behind HTTP, with dynamic batching.

`spec` declares the routes and their fields (GET /spec says them), `requests` turns a JSON body
into a checked job, `libre` reads LibreTranslate's requests, `batcher` decodes the lines of
concurrent jobs together, `metrics` counts for /metrics, `suggestions` keeps POST /suggest's
file, and `app` is the aiohttp application and its run loop.
"""
