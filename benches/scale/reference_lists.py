"""The public project list in the reference stack of ../shared/perf-reference (FastAPI,
SQLAlchemy async with asyncpg), over a database seeded by seed.py, for list_ratio.py.

It does the least work a correct implementation could: one COUNT for the total and one
SELECT of the page (LIMIT / OFFSET, newest first), a search through the same full-text
column and GIN index the service uses (no ranking of title matches first), every column the
service's project view shows. Not part of the service.

    PEER_DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/scale_m \\
        uvicorn reference_lists:app --host 127.0.0.1 --port 19091 --workers 2
"""
import os

from fastapi import FastAPI, HTTPException
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

DB = os.environ["PEER_DATABASE_URL"]
engine = create_async_engine(DB, pool_size=10, max_overflow=0)
app = FastAPI()

LISTED = ("project_type = 'curated' AND "
          "status IN ('published_curated', 'bidding', 'published', 'open')")
COLUMNS = ("id, company_id, expert_id, target_expert_id, title, description, budget_minor, "
           "currency, deadline, skills_required, project_type, status, published_at, "
           "created_at, updated_at")


@app.get("/api/projects/public")
async def public(page: int = 1, size: int = 20, search: str | None = None):
    if page < 1 or not 1 <= size <= 100:
        raise HTTPException(422, "bad page")
    where, params = LISTED, {}
    if search and search.strip():
        where += " AND text_words @@ plainto_tsquery('simple', fold_text(:q))"
        params["q"] = search.strip()
    async with engine.connect() as c:
        total = (await c.execute(text(f"SELECT COUNT(*) FROM projects WHERE {where}"),
                                 params)).scalar_one()
        rows = (await c.execute(
            text(f"SELECT {COLUMNS} FROM projects WHERE {where} "
                 "ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset"),
            {**params, "limit": size, "offset": (page - 1) * size})).mappings().all()
    items = []
    for r in rows:
        item = dict(r)
        for key in ("deadline", "published_at", "created_at", "updated_at"):
            if item[key] is not None:
                item[key] = item[key].isoformat()
        items.append(item)
    return {"items": items, "total": total, "page": page, "size": size,
            "pages": (total + size - 1) // size}
