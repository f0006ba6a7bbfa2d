"""GraphQL errors in the same tree as HTTP problems.

An ``AppError`` keeps its detail and gains ``extensions.code`` (the problem code in upper
snake case, e.g. ``NOT_FOUND``) and ``extensions.type``. A database that does not answer
is ``UNAVAILABLE``, as over REST. Any other error raised while resolving is masked: no
SQL, no stack trace reaches the client. Errors of the document
itself (syntax, validation, the limiters, variables) are shown as they are, coded
``BAD_REQUEST``.
"""

import logging
from collections.abc import Iterator
from typing import Any

from graphql.error import GraphQLError
from strawberry.extensions import SchemaExtension

from app.errors import AppError, Unavailable
from app.store.failures import as_app_error, is_unavailable

logger = logging.getLogger(__name__)


def error_code(exc: AppError) -> str:
    return exc.code.upper().replace("-", "_")


def code_document_error(error: GraphQLError) -> None:
    """Code an error of the document itself (syntax, validation, the limiters, variables
    that do not coerce) ``BAD_REQUEST``, in place, like every other error. A document
    that does not parse never reaches ``ProblemErrors``: the schema's ``process_errors``
    calls this for those."""
    original = error.original_error
    of_the_document = original is None or isinstance(original, GraphQLError)
    if of_the_document and "code" not in (error.extensions or {}):
        error.extensions = {**(error.extensions or {}), "code": "BAD_REQUEST"}


def log_if_unexpected(error: GraphQLError) -> None:
    """Log an error that is not the client's: with its traceback, what is not an
    ``AppError``, a value PostgreSQL refused or an error of the document; in a line, an
    ``AppError`` of the server's (status 500 and up: a 503, such as a walk past its time
    budget, as a warning), and a database that does not answer, as ``problems`` logs
    those over REST. (The schema's
    ``process_errors`` calls this for every error, whichever way it came.)"""
    original = error.original_error
    if isinstance(original, AppError):
        if isinstance(original, Unavailable):  # to retry: as ``problems`` logs it
            logger.warning("%s: %s", original.code, original.detail)
        elif original.status >= 500:
            logger.error("%s: %s", original.code, original.detail)
        return
    if original is None or isinstance(original, GraphQLError):
        return
    named = as_app_error(original)
    if named is None:
        logger.error("unexpected error in GraphQL: %s", error.message, exc_info=original)
    elif is_unavailable(original):
        logger.warning("database unavailable in GraphQL: %s", original)


def _render(error: GraphQLError) -> GraphQLError:
    original = error.original_error
    if original is None or isinstance(original, GraphQLError):
        code_document_error(error)
        return error
    if not isinstance(original, AppError):
        # A database that did not answer, a value it refused: as REST answers them.
        original = as_app_error(original) or original
    if isinstance(original, AppError):
        extensions: dict[str, Any] = {
            "code": error_code(original),
            "type": f"/problems/{original.code}",
        }
        extensions.update(original.extensions)
        message = original.detail
    else:  # logged already (log_if_unexpected)
        extensions, message = {"code": "INTERNAL"}, "Unexpected error."
    return GraphQLError(
        message, error.nodes, error.source, error.positions, error.path, extensions=extensions
    )


class ProblemErrors(SchemaExtension):
    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if result is None:
            return
        refusal = getattr(getattr(self.execution_context.context, "budget", None), "refusal", None)
        if refusal is not None:
            # Past the budget (items or time), lists failed or came back empty
            # (AnswerBudget.spent): the partial answer is not what was asked for, so the
            # request answers that alone.
            result.data = None
            result.errors = [_render(GraphQLError(refusal.detail, original_error=refusal))]
            return
        errors = getattr(result, "errors", None)
        if errors:
            result.errors = [_render(e) for e in errors]
