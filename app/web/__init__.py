"""What every HTTP face shares: who is asking (``auth``, ``dependencies``), errors as
RFC 9457 problems (``problems``), and request bodies read up to a cap (``bodies``).

It sits below the faces (``app.api``, ``app.graphql``) and below ``ingest`` and
``scheduler``'s routers, so none of them imports another to authenticate a request or to
render an error.
"""
