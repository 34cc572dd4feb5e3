"""A small REST API for notes, kept in SQLite (standard library).

  GET    /notes        list
  POST   /notes        create from {"text": "..."}
  GET    /notes/<id>   read
  DELETE /notes/<id>   delete

NOTES_DB names the database file (default: notes.db in the temp directory).
Every worker process opens the same file, so they all see the same notes.
"""
import os
import sqlite3
import tempfile

DB = os.environ.get("NOTES_DB") or os.path.join(tempfile.gettempdir(), "notes.db")


def _db():
    conn = sqlite3.connect(DB, timeout=5)
    conn.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    return conn


def _error(status, message):
    return {"statusCode": status, "body": {"error": message}}


def handler(event, context):
    parts = [p for p in event["path"].split("/") if p]
    if not parts or parts[0] != "notes" or len(parts) > 2:
        return _error(404, "try /notes")
    with _db() as db:
        if len(parts) == 1:
            if event["method"] == "GET":
                rows = db.execute("SELECT id, text FROM notes ORDER BY id").fetchall()
                return [{"id": i, "text": t} for i, t in rows]
            if event["method"] == "POST":
                body = event.get("json")
                if not isinstance(body, dict) or not isinstance(body.get("text"), str) or not body["text"].strip():
                    return _error(400, 'send JSON {"text": "..."}')
                cur = db.execute("INSERT INTO notes (text) VALUES (?)", (body["text"],))
                return {"statusCode": 201, "headers": {"Location": f"/notes/{cur.lastrowid}"},
                        "body": {"id": cur.lastrowid, "text": body["text"]}}
            return _error(405, "GET or POST")
        if not parts[1].isdigit():
            return _error(400, "note ids are numbers")
        note_id = int(parts[1])
        row = db.execute("SELECT id, text FROM notes WHERE id = ?", (note_id,)).fetchone()
        if row is None:
            return _error(404, f"no note {note_id}")
        if event["method"] == "GET":
            return {"id": row[0], "text": row[1]}
        if event["method"] == "DELETE":
            db.execute("DELETE FROM notes WHERE id = ?", (note_id,))
            return None
        return _error(405, "GET or DELETE")
