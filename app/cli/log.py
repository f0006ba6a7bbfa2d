"""``causeway verify`` (the hash chain, offline) and ``causeway replay`` (a filtered
stream as NDJSON or Parquet, to a file or stdout)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import stat
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sqlalchemy import URL

from app.api.replay import replay_filter, split_types
from app.cli.runtime import (
    database,
    err_console,
    fail,
    load_settings,
    once,
    plain_integer,
    utf8,
)
from app.db.engine import create_engine
from app.errors import AppError
from app.store.keys import TENANT_PATTERN
from app.store.reads import EventReader
from app.store.records import MAX_POSITION, EventFilter, parse_position
from app.store.verify import ChainReport, read_head, verify_chain


def verify(
    anchor: Annotated[
        list[str] | None,
        typer.Option(
            metavar="POSITION:HASH",
            help="a hash the chain must still carry at that position, kept outside the "
            "database: the '<events>:<head>' of an earlier verify (repeatable)",
            show_default="none",
        ),
    ] = None,
    anchors_file: Annotated[
        Path | None,
        typer.Option(
            "--anchors",
            metavar="FILE",
            help="every anchor of a file that 'causeway anchor' appended to, one "
            "POSITION:HASH at the start of each line",
            show_default="none",
        ),
    ] = None,
) -> None:
    """Re-check the whole hash chain; exit 1 at the first event that does not match."""
    settings = load_settings()
    anchors: dict[int, bytes] = {}
    # Two anchors giving two hashes for one position: the chain there was rewritten
    # between the two (what anchors are kept for), whichever the chain holds now.
    rewritten: dict[int, str] = {}
    given = [(text, "--anchor") for text in anchor or []]
    if anchors_file is not None:
        given += _anchor_lines(anchors_file)
    for text, where in given:
        position, digest = _parse_anchor(text, where)
        if anchors.setdefault(position, digest) != digest:
            rewritten.setdefault(position, where)
    with database(settings) as db:
        report = asyncio.run(_verify(db.url, anchors, settings.max_event_data_bytes))
    first = min(rewritten, default=None)
    if not report.is_intact and (first is None or 0 < (report.bad_position or 0) <= first):
        where = f"position {report.bad_position}" if report.bad_position else "the log head"
        fail(f"hash chain broken at {where}: {report.reason}", 1)
    if first is not None:
        fail(
            f"hash chain broken at position {first}: {rewritten[first]} gives another hash "
            "for it than an anchor before it: the chain there was rewritten between the two",
            1,
        )
    typer.echo(f"ok: {report.count} events, head {report.head_hash.hex()}")
    if report.count:  # an empty log has nothing to anchor (and --anchor takes no 0)
        # What to keep outside the database, to pass later as --anchor.
        typer.echo(f"anchor: {report.count}:{report.head_hash.hex()}")


_ANCHOR = re.compile(r"([0-9]+):([0-9a-fA-F]{64})")


def _parse_anchor(text: str, where: str) -> tuple[int, bytes]:
    found = _ANCHOR.fullmatch(text)
    position = None if found is None else parse_position(found[1])
    if found is None or not position:
        fail(f"{where} takes POSITION:HASH (a position and 64 hex digits), not {text!r}")
    return position, bytes.fromhex(found[2])


Once = list[str] | None  # an option given at most once (``replay`` refuses it twice)


def _filter(metavar: str, help: str) -> Any:
    """A ``replay`` filter: a text that must match exactly, unset to take every event."""
    return typer.Option(metavar=metavar, help=help, show_default="any", callback=utf8)


def _anchor_lines(path: Path) -> list[tuple[str, str]]:
    """The anchors of ``path``: the first word of each line that is not blank or a
    ``#`` comment, each with where it was read (``FILE line N``)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--anchors {path}: {getattr(exc, 'strerror', None) or exc}")
    return [
        (line.split()[0], f"{path} line {n}")
        for n, line in enumerate(lines, 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def anchor(
    journal: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="the file to append to (created if absent); keep it where the "
            "database's owner cannot rewrite it",
        ),
    ],
) -> None:
    """Append the log's head to FILE as one line, 'POSITION:HASH TIME'. Run it on a
    timer; 'verify --anchors FILE' then catches a rewritten or cut tail up to the
    last line (docs/hash-chain.md)."""
    settings = load_settings()
    with database(settings) as db:
        head = asyncio.run(_head(db.url))
    if head is None:  # a missing row is no empty log: the anchor's timer must not go quiet
        fail("the log head row is missing: run `causeway verify`", 1)
    position, digest = head
    if position == 0:
        typer.echo("the log is empty: nothing to anchor")
        return
    line = f"{position}:{digest.hex()} {datetime.now(UTC).isoformat(timespec='seconds')}\n"
    try:
        with journal.open("a+b") as out:
            # A last line without its newline (typed by hand) would take this anchor in
            # as its tail, where verify never reads it: a line of its own, always.
            if out.seek(0, os.SEEK_END) > 0:
                out.seek(-1, os.SEEK_END)
                if out.read(1) != b"\n":
                    line = "\n" + line
            out.write(line.encode())
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        fail(f"cannot append to {journal}: {exc.strerror or exc}")
    typer.echo(f"anchor: {position}:{digest.hex()} appended to {journal}")


async def _head(url: URL | str) -> tuple[int, bytes] | None:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return await read_head(conn)
    finally:
        await engine.dispose()


async def _verify(
    url: URL | str, anchors: dict[int, bytes], largest_event_bytes: int
) -> ChainReport:
    engine = create_engine(url, pool_size=1, statement_timeout_ms=0)
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                return await verify_chain(
                    conn, anchors=anchors, largest_event_bytes=largest_event_bytes
                )
    finally:
        await engine.dispose()


def _tenants(values: list[str] | None) -> list[str] | None:
    """Tenants a key can have: a name no key can have has no events, and is a typo."""
    for value in values or []:
        utf8(value)
        if not TENANT_PATTERN.match(value):
            raise typer.BadParameter(
                "must be 1-63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
            )
    return values


def replay(
    # Each option but --types a list, to refuse one given twice (click keeps the last of
    # a single option: `--limit 10 --limit 20` would export 20 with exit 0).
    out: Annotated[
        list[Path], typer.Option("--out", metavar="FILE", help="file to write ('-' for stdout)")
    ],
    tenant: Annotated[
        Once,
        typer.Option(
            metavar="TENANT", help="tenant to replay", show_default="default", callback=_tenants
        ),
    ] = None,
    after: Annotated[
        list[int] | None,
        typer.Option(
            parser=plain_integer(0, MAX_POSITION),
            metavar="POSITION",
            help="resume after this position",
            show_default="0",
        ),
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TYPE",
            help="only events of these types, comma-separated; may be repeated",
            show_default="every type",
            callback=utf8,
        ),
    ] = None,
    stream: Annotated[Once, _filter("STREAM", "only the events of this stream")] = None,
    source: Annotated[Once, _filter("SOURCE", "only events with this source")] = None,
    correlationid: Annotated[Once, _filter("ID", "only the events of this workflow run")] = None,
    modelname: Annotated[Once, _filter("NAME", "only events produced by this model")] = None,
    modelversion: Annotated[
        Once, _filter("VERSION", "only events produced by this model version")
    ] = None,
    since: Annotated[
        Once,
        typer.Option(metavar="TIME", help="event time >= (RFC 3339)", show_default="no bound"),
    ] = None,
    until: Annotated[
        Once,
        typer.Option(metavar="TIME", help="event time < (RFC 3339)", show_default="no bound"),
    ] = None,
    limit: Annotated[
        list[int] | None,
        typer.Option(
            parser=plain_integer(1, MAX_POSITION),
            metavar="COUNT",
            help="stop after this many events",
            show_default="no limit",
        ),
    ] = None,
    format: Annotated[
        Once,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="ndjson (a CloudEvent a line) or parquet",
            show_default="ndjson",
        ),
    ] = None,
) -> None:
    """Write matching events as NDJSON or Parquet, in position order, with progress on
    stderr."""
    settings = load_settings()
    one = once(
        "only --types takes many",
        out=out, tenant=tenant, after=after, stream=stream, source=source,
        correlationid=correlationid, modelname=modelname, modelversion=modelversion,
        since=since, until=until, limit=limit, format=format,
    )  # fmt: skip
    form = "ndjson" if one["format"] is None else one["format"]  # "" is refused below
    if form not in ("ndjson", "parquet"):
        fail(f"--format must be ndjson or parquet, not {form!r}")
    if types and not all(split_types(value) for value in types):  # as GET /replay: 422
        fail("--types is given empty: each --types names at least one type")
    try:
        selection = replay_filter(
            one["after"] or 0,
            ",".join(types) if types else None,
            one["stream"],
            one["source"],
            one["correlationid"],
            one["modelname"],
            one["modelversion"],
            one["since"],
            one["until"],
            one["limit"],
        )
    except AppError as exc:
        fail(exc.detail)
    target = out[0]  # required: given once, as checked above
    tenant_name = one["tenant"] or "default"
    with database(settings) as db:
        fetch_rows = settings.replay_fetch_rows
        count = asyncio.run(_replay(db.url, tenant_name, selection, target, fetch_rows, form))
    typer.echo(f"wrote {count} events to {target}", err=True)


async def _replay(
    url: URL | str, tenant: str, selection: EventFilter, out: Path, fetch_rows: int, form: str
) -> int:
    engine = create_engine(url, pool_size=1, statement_timeout_ms=0)
    count = 0
    try:
        async with engine.connect() as conn:
            sink, partial = _open_for_writing(out)
            try:
                count = await _write_replay(conn, sink, tenant, selection, fetch_rows, form)
                _finish(sink)
            except BaseException:
                if sink is not sys.stdout.buffer:
                    with contextlib.suppress(OSError):  # what is left unwritten goes too
                        sink.close()
                if partial is not None:
                    partial.unlink(missing_ok=True)
                raise
            if partial is not None:
                partial.replace(out)
    finally:
        await engine.dispose()
    return count


def _open_for_writing(out: Path) -> tuple[IO[bytes], Path | None]:
    """Where the replay goes, and the file to rename onto ``out`` once it is complete.
    A regular file named as itself (or a new name) is written beside itself, with its
    permissions, and renamed at the end, so a replay that fails half way leaves an
    earlier export as it was. Anything else is written through, as it is: ``-``, a
    symlink (``/dev/stdout`` and ``/dev/fd/N`` are links, to what the shell redirected,
    which may be a file being appended to), a pipe, a device."""
    if str(out) == "-":
        return sys.stdout.buffer, None
    try:
        found = os.lstat(out)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")
    if out.is_dir():
        fail(f"--out {out}: is a directory")
    try:
        if found is not None and not stat.S_ISREG(found.st_mode):
            return out.open("wb"), None
        partial = _partial_of(out)
        mode = stat.S_IMODE(found.st_mode) if found is not None else 0o666
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()  # left by a replay that was killed; never followed (a link)
        # Made with the export's mode (the umask narrows it): made wider and narrowed after,
        # another local user could open it in between and read the export as it is written.
        sink = os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb")
        if found is not None:
            os.chmod(partial, mode)  # the export's mode exactly, whatever the umask took
        return sink, partial
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")


def _partial_of(out: Path) -> Path:
    """Where the export is written until it is whole: ``.NAME.partial`` beside ``out``,
    or, where that would pass the longest name the folder takes, a name made of a digest
    of NAME (the same for the same target: what a killed replay left is found again)."""
    name = f".{out.name}.partial"
    try:
        longest = os.pathconf(out.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        longest = 255
    if len(os.fsencode(name)) > longest:
        name = f".{hashlib.sha256(os.fsencode(out.name)).hexdigest()[:32]}.partial"
    return out.with_name(name)


def _finish(sink: IO[bytes]) -> None:
    """Write out what the sink still buffers: a full disk may refuse that last part."""
    try:
        if sink is sys.stdout.buffer:
            sink.flush()
        else:
            sink.close()
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        fail(f"writing the replay: {exc.strerror or exc}", 1)


async def _write_replay(
    conn: Any, sink: IO[bytes], tenant: str, selection: EventFilter, fetch_rows: int, form: str
) -> int:
    count = 0
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.completed} events"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
            disable=not err_console.is_terminal,  # else it ends with a blank line of its own
        ) as progress:
            task = progress.add_task("replay", total=None)
            reader = EventReader(conn)
            if form == "parquet":
                from app.store.parquet import parquet_file  # pyarrow: on first use

                async def rows() -> AsyncIterator[list[tuple[Any, ...]]]:
                    nonlocal count
                    async for chunk in reader.replay_rows(tenant, selection, fetch_rows=fetch_rows):
                        count += len(chunk)
                        progress.update(task, completed=count)
                        yield chunk

                async for piece in parquet_file(rows()):
                    sink.write(piece)
            else:
                async for lines in reader.replay(tenant, selection, fetch_rows=fetch_rows):
                    sink.write(lines.text.encode())
                    count += lines.count
                    progress.update(task, completed=count)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        fail(f"writing the replay: {exc.strerror or exc}", 1)
    return count
