"""A Python function that reverses text and reports the time it has left."""


def handler(event, context):
    text = event["query"].get("text") or event["body"] or ""
    if not text:
        return {"statusCode": 400, "body": {"error": "give ?text= or a text body"}}
    print(f"reversing {len(text)} characters")
    return {"reversed": text[::-1], "remaining_ms": context.get_remaining_time_ms() > 0}
