"""The yardsticks' work (../shared/bench/ceiling.py) as a plain Flask app:
Flask's routing, request and JSON, and nothing of plantstore's stack
(no flask-smorest, marshmallow or peewee). What the framework itself costs
under plantstore's gunicorn set-up; ``bench/floor.py`` runs it.

Served from the yardsticks' directory (it imports ceiling.py's connection
helper), on a database ``ceiling.py seed`` made.
"""
import hashlib

from ceiling import PG, IntegrityError, run
from flask import Flask, g, jsonify, request

app = Flask(__name__)


@app.before_request
def authenticate():
    header = request.headers.get("Authorization", "")
    row = run("select user_id from token where digest=?",
              (hashlib.sha256(header[7:].encode()).hexdigest(),)).fetchone()
    if not header.startswith("Bearer ") or row is None:
        return jsonify(error=401, message="unauthorized"), 401
    g.user = row[0]


@app.get("/plants")
def list_plants():
    limit = request.args.get("limit", 100, type=int)
    after = request.args.get("after", -2**63, type=int)
    rows = run("select id, name, tag from plant where owner_id=? and id>? order by id limit ?",
               (g.user, after, limit + 1)).fetchall()
    headers = {}
    if len(rows) > limit:
        rows = rows[:limit]
        headers["Link"] = f'</plants?limit={limit}&after={rows[-1][0]}>; rel="next"'
    plants = [{"name": n, "tag": t} if t is not None else {"name": n} for _, n, t in rows]
    return jsonify(plants), 200, headers


@app.post("/plants")
def create():
    body = request.get_json()
    try:
        run("begin" if PG else "begin immediate")
        run("insert into plant(id, owner_id, name, tag) values (?,?,?,?)",
            (body["id"], g.user, body["name"], body.get("tag")))
        run("insert into outbox(plant_id, payload) values (?, ?)",
            (body["id"], request.get_data(as_text=True)))
        run("commit")
    except IntegrityError:
        run("rollback")
        return jsonify(error=409, message="exists"), 409
    plant = {"name": body["name"]}
    if body.get("tag") is not None:
        plant["tag"] = body["tag"]
    return jsonify(plant)
