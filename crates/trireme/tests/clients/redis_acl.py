"""redis-py 8 with its defaults (RESP3, so it authenticates with `HELLO 3 AUTH`) against a
node with ACLs on and default deny, using ACL token secrets as passwords: no password is
NOAUTH, a wrong one WRONGPASS, the app token's secret may use keys under app/ but not
app/secret or other keys (NOPERM), a pipeline gets each command's own answer, pub/sub
channels follow the token's event rules, and whole-keyspace commands need list on every key.

Usage: redis_acl.py HOST PORT APP_SECRET LISTER_SECRET

APP_SECRET's token may write app/ (but not app/secret) and channels app-*; LISTER_SECRET's
may list every key and nothing more. Prints one JSON line of what it saw and exits 0 only
if every check held.
"""

import json
import sys

import redis
from redis.exceptions import AuthenticationError, NoPermissionError

host, port, app_secret, lister_secret = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
failures = []
seen = {}


def check(what, ok, detail=""):
    if not ok:
        failures.append(f"{what}: {detail!r}")
    return ok


def raises(what, kind, words, call):
    """Checks that `call` fails with `kind` whose message holds `words`."""
    try:
        got = call()
    except kind as e:
        seen[what] = str(e)
        return check(what, words in str(e), e)
    except Exception as e:  # noqa: BLE001 - any other failure is what the check reports
        return check(what, False, f"{type(e).__name__}: {e}")
    return check(what, False, f"no error, answered {got!r}")


def client(**kwargs):
    return redis.Redis(host=host, port=port, **kwargs)


# No password: redis-py's RESP3 handshake (HELLO 3 without AUTH) is refused with NOAUTH, as
# Redis refuses it when a password is set; RESP2 gets NOAUTH at its first command.
raises("no password is NOAUTH", AuthenticationError, "HELLO must be called with the client already authenticated",
       lambda: client().get("app/x"))
raises("no password in RESP2 is NOAUTH", AuthenticationError, "Authentication required",
       lambda: client(protocol=2).get("app/x"))
raises("wrong password is WRONGPASS", AuthenticationError, "invalid username-password pair",
       lambda: client(password="not-a-secret").get("app/x"))
raises("wrong password with a user is WRONGPASS", AuthenticationError,
       "invalid username-password pair",
       lambda: client(username="default", password="not-a-secret").get("app/x"))

app = client(password=app_secret)
check("set under app/", app.set("app/a", "1") is True)
check("get under app/", app.get("app/a") == b"1", app.get("app/a"))
seen["protocol"] = app.execute_command("HELLO")[b"proto"]
check("redis-py negotiated RESP3", seen["protocol"] == 3, seen["protocol"])

named = client(username="default", password=app_secret)
check("user default with the secret", named.incr("app/n") == 1)
check("both connections see one store", app.get("app/n") == b"1", app.get("app/n"))

# RESP2 logs in with a bare `AUTH <secret>`.
resp2 = client(password=app_secret, protocol=2)
check("RESP2 AUTH <secret>", resp2.get("app/a") == b"1")

for what, call in [
    ("set outside app/", lambda: app.set("other/x", "1")),
    ("get outside app/", lambda: app.get("other/x")),
    ("set denied app/secret", lambda: app.set("app/secret", "1")),
    ("get denied app/secret", lambda: app.get("app/secret")),
    ("mset across the rule", lambda: app.mset({"app/b": "1", "other/b": "1"})),
    ("keys needs list on every key", lambda: app.keys("app/*")),
    ("dbsize needs list on every key", lambda: app.dbsize()),
    ("flushall needs write on every key", lambda: app.flushall()),
]:
    raises(what, NoPermissionError, "no permissions", call)
check("refused mset wrote nothing", app.exists("app/b") == 0)

# A pipeline (no MULTI) answers each command: refusals are that command's result only.
pipe = app.pipeline(transaction=False)
pipe.set("app/p", "x")
pipe.set("other/p", "x")
pipe.get("app/p")
pipe.get("app/secret")
pipe.incr("app/n")
answers = pipe.execute(raise_on_error=False)
kinds = [type(a).__name__ for a in answers]
seen["pipeline"] = kinds
check("pipeline answers per command", len(answers) == 5 and answers[0] is True
      and isinstance(answers[1], NoPermissionError) and answers[2] == b"x"
      and isinstance(answers[3], NoPermissionError) and answers[4] == 2, answers)

# Channels: publish and subscribe within app-*, not elsewhere.
sub = app.pubsub()
sub.subscribe("app-news")
confirm = sub.get_message(timeout=5)
check("subscribe app-news", confirm is not None and confirm["type"] == "subscribe", confirm)
check("publish to app-news reaches the subscriber", named.publish("app-news", "hi") == 1)
message = sub.get_message(timeout=5)
check("message received", message is not None and message["data"] == b"hi", message)
sub.close()
raises("publish outside app-*", NoPermissionError, "no permissions",
       lambda: app.publish("ops", "hi"))

# The lister may list every key but change none.
lister = client(password=lister_secret)
listed = sorted(lister.keys("app/*"))
check("lister keys", b"app/a" in listed and b"app/p" in listed, listed)
check("lister dbsize", lister.dbsize() >= 3, lister.dbsize())
raises("lister may not write", NoPermissionError, "no permissions",
       lambda: lister.set("app/a", "2"))

print(json.dumps({"failures": failures, "seen": seen}))
sys.exit(1 if failures else 0)
