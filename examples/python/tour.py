#!/usr/bin/env python3
"""The tally tour in Python: plain counters with redis-py (Debian's python3-redis), derived
counters over the HTTP API with the standard library's urllib.

    TALLY_HOST=127.0.0.1 TALLY_PORT=6380 TALLY_HTTP_PORT=6381 python3 tour.py

Run it against a fresh tallyd (`make run DATA=$(mktemp -d)`): it prints
../expected-output.txt.
"""

import json
import os
import urllib.request

import redis

HOST = os.environ.get("TALLY_HOST", "127.0.0.1")
PORT = int(os.environ.get("TALLY_PORT", "6380"))
API = "http://%s:%s" % (HOST, os.environ.get("TALLY_HTTP_PORT", "6381"))

DEFINITIONS = """
CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, is_published boolean);
CREATE COUNTER blog_posts AS
  SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
"""


def api(method, path, body=None, headers=None):
    """One call to the HTTP API; returns the decoded JSON reply (errors raise HTTPError)."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    request = urllib.request.Request(API + path, data=data, method=method,
                                     headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def post(post_id, user_id, blog_id):
    """A change: post `post_id` was created, published."""
    return {"source": "posts", "new": {"id": post_id, "user_id": user_id, "blog_id": blog_id,
                                       "is_published": True}}


def main():
    r = redis.Redis(host=HOST, port=PORT, decode_responses=True, socket_timeout=10)

    # 1. A hot counter: many increments, one exact read (no shards to sum).
    with r.pipeline(transaction=False) as pipe:
        for _ in range(100):
            pipe.incr("likes:post:7")
        pipe.execute()
    print("likes:post:7 = %s after 100 increments" % r.get("likes:post:7"))

    # 2. A fixed-window rate limit: the first call of a window starts its 60 s clock (NX).
    verdicts = []
    for _ in range(5):
        calls = r.execute_command("INCRBYEX", "api:calls:alice", 1, "EX", 60, "NX")
        verdicts.append("allowed" if calls <= 3 else "denied")
    print("rate limit api:calls:alice, 3 a minute: " + " ".join(verdicts))

    # 3. A derived counter: defined once as SQL, kept from the changes the app pushes. A
    #    change sent again with the same idempotency key is counted once.
    results = api("POST", "/v1/definitions", DEFINITIONS.encode())["results"]
    print("definitions: " + ", ".join(results))
    for label in ("push", "resend"):
        reply = api("POST", "/v1/changes", post(1, 3, 7), {"Idempotency-Key": "post-1"})
        print("%s post-1: applied %d, duplicates %d" % (label, reply["applied"],
                                                         reply["duplicates"]))
    batch = [post(2, 5, 7), post(3, 5, 7), post(4, 5, 8)]
    reply = api("POST", "/v1/changes?id=posts-2-4", batch)
    print("push posts 2-4: applied %d, duplicates %d" % (reply["applied"], reply["duplicates"]))
    print("blog_posts:7:3 = %d" % api("GET", "/v1/value/blog_posts/7/3")["value"])

    # 4. A family (every author of blog 7) and its top-K.
    family = api("GET", "/v1/list/blog_posts/7")["items"]
    print("family blog_posts:7: " + " ".join("%(key)s=%(value)d" % i for i in family))
    top = api("GET", "/v1/top/blog_posts/7?k=1")["items"]
    print("top 1 of blog 7: " + " ".join("%(key)s=%(value)d" % i for i in top))

    # 5. Follow a counter live: its current value first, then each new value.
    seen = []
    with r.pubsub() as subscription:
        subscription.subscribe("likes:post:7")
        for message in subscription.listen():
            if message["type"] != "message":
                continue
            seen.append(message["data"])
            if len(seen) == 3:
                break
            r.incr("likes:post:7")
    print("live likes:post:7: " + " ".join(seen))


if __name__ == "__main__":
    main()
