"""Row-level security: the service runs as roles that do not own the tables, and a
tenant's reads see that tenant's rows only.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05

Two roles, made here unless the server has them (roles belong to the server, not to one
database; ``CREATE ROLE`` needs a superuser or ``CREATEROLE``), neither able to log in:

- ``causeway_system``: what every connection of the service runs as (``-c role=`` at
  connection start, ``app.db.engine``): reads and writes rows of every table, every
  tenant's (the writer's groups hold many tenants, the projections, the relay and the
  verification read the whole log). It may create, alter or drop nothing.
- ``causeway_service``: what a tenant's read runs as (``app.db.tenancy``): SELECT only,
  and in each tenant-scoped table only the rows whose ``tenant`` is the session's
  ``causeway.tenant`` setting; with none set, no rows.

The user that migrates becomes a member of ``causeway_system`` (so that its connections,
and the service's when it logs in as the same user, may take that role), and
``causeway_system`` a member of ``causeway_service`` (a system session switches to it for
a tenant's read). Tables the same user creates later get the same privileges (default
privileges). Row-level security is enabled, not forced: the owner (migrations, an
operator's ``psql``) still sees every row.

The hash chain runs across tenants, so a tenant's walk checks each of its events against
the next event's ``prev_hash``, whoever's it is: the view ``event_chain_links`` (position
and prev_hash of every event, nothing else) reads ``events`` with its owner's rights.

Downgrade drops the policies, the view and the privileges; the roles stay, as other databases on
the server may use them (``DROP ROLE`` them by hand once none does).
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

SYSTEM = "causeway_system"
SERVICE = "causeway_service"
CHAIN_LINKS = "event_chain_links"
TENANT_TABLES = (
    "events",
    "api_keys",
    "model_versions",
    "model_aliases",
    "deployments",
    "deployment_history",
    "drift_sources",
    "routes",
    "tasks",
    "prewarm_windows",
    "queue_autoscale",
)

# Idempotent, and safe when two migrations run at once on one server (tests do): a role
# or a membership another session made meanwhile is no error.
_ROLES = f"""
DO $roles$
BEGIN
    -- Looked up first: PostgreSQL checks the right to create roles before it finds one
    -- exists, and a server's second database is migrated by a user without that right.
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{SERVICE}') THEN
        BEGIN
            CREATE ROLE {SERVICE} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{SYSTEM}') THEN
        BEGIN
            CREATE ROLE {SYSTEM} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
    IF NOT pg_has_role('{SYSTEM}', '{SERVICE}', 'MEMBER') THEN
        BEGIN
            GRANT {SERVICE} TO {SYSTEM};
        EXCEPTION WHEN unique_violation OR internal_error THEN NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, '{SYSTEM}', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT {SYSTEM} TO %I', current_user);
        EXCEPTION WHEN unique_violation OR internal_error THEN NULL;
        END;
    END IF;
END
$roles$
"""  # noqa: S608 (constant names, no input)


def upgrade() -> None:
    op.execute(_ROLES)
    op.execute(f"GRANT USAGE ON SCHEMA public TO {SYSTEM}, {SERVICE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {SYSTEM}")
    op.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {SERVICE}")
    op.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {SYSTEM}")
    # The system reads which revision the database is at (``GET /readyz``), no more.
    op.execute(f"REVOKE ALL ON alembic_version FROM {SYSTEM}, {SERVICE}")
    op.execute(f"GRANT SELECT ON alembic_version TO {SYSTEM}")
    op.execute(
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public"
        f" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {SYSTEM}"
    )
    op.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {SERVICE}")
    op.execute(
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public"
        f" GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {SYSTEM}"
    )
    # The chain runs across tenants: a tenant's event is verified against the next
    # event's prev_hash, whoever's it is. A view reads its base table with its owner's
    # rights, so through this one a tenant's walk sees every event's position and chain
    # link (hashes, nothing of any content), while ``events`` itself shows it its own.
    op.execute(f"CREATE VIEW {CHAIN_LINKS} AS SELECT position, prev_hash FROM events")  # noqa: S608
    op.execute(f"GRANT SELECT ON {CHAIN_LINKS} TO {SYSTEM}, {SERVICE}")
    for table in TENANT_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_rows ON {table} TO {SERVICE}"
            " USING (tenant = current_setting('causeway.tenant', true))"
        )
        op.execute(
            f"CREATE POLICY every_tenant ON {table} TO {SYSTEM} USING (true) WITH CHECK (true)"
        )


def downgrade() -> None:
    op.execute(f"DROP VIEW {CHAIN_LINKS}")
    for table in TENANT_TABLES:
        op.execute(f"DROP POLICY every_tenant ON {table}")
        op.execute(f"DROP POLICY tenant_rows ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    op.execute(
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public"
        f" REVOKE USAGE, SELECT, UPDATE ON SEQUENCES FROM {SYSTEM}"
    )
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM {SERVICE}"  # noqa: S608 (constant names, no input)
    )
    op.execute(
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public"
        f" REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM {SYSTEM}"
    )
    op.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {SYSTEM}")
    op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {SYSTEM}, {SERVICE}")
    op.execute(f"REVOKE USAGE ON SCHEMA public FROM {SYSTEM}, {SERVICE}")
