"""Goal: the pages stay quick under worker load on PostgreSQL too (`make bench-postgres`)."""

from bench import loaded
from bench.common import Context, Result


def run(ctx: Context) -> Result:
    return loaded.run(ctx, database_url=ctx.database_url)
