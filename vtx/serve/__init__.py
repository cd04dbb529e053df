"""`vtx serve`: translation (and parsing) behind HTTP, with dynamic batching.

`settings` holds what the command line decides (defaults and limits), `requests` turns a JSON
body into a checked job, `batcher` decodes the lines of concurrent jobs together on one thread,
`metrics` counts for /metrics, and `app` is the aiohttp application and its run loop.
"""
