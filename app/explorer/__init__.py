"""The lineage explorer at ``/ui/``: pages for a browser, served by ``causeway serve``.

The server side is one HTML shell and a folder of our own ES modules (``static/``), with
no build step; the pages read through the public HTTP and GraphQL API with the key the
user typed (kept in ``sessionStorage``). ``docs/explorer.md`` describes the pages.
"""
