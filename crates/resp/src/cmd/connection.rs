//! PING, ECHO, HELLO, SELECT, CLIENT, AUTH.

use super::{CmdError, CmdResult, Ctx};
use crate::{Args, Reply};

pub(crate) fn ping(args: &mut Args) -> CmdResult {
    match args.remaining() {
        0 => Ok(Reply::simple("PONG")),
        1 => Ok(Reply::Bulk(args.next_bytes()?)),
        _ => Err(args.wrong_arity().into()),
    }
}

pub(crate) fn echo(args: &mut Args) -> CmdResult {
    let message = args.next_bytes()?;
    if args.remaining() > 0 {
        return Err(args.wrong_arity().into());
    }
    Ok(Reply::Bulk(message))
}

/// `HELLO [protover [AUTH u p] [SETNAME n]]`: protocol 2 or 3 for the rest of the
/// connection, answered with the server's description (a map in RESP3). RESP3 here means its
/// null (`_`) and map (`%`) types where replies have them; other RESP3 types (doubles,
/// booleans, sets, verbatim strings, pushes) are not used by any command yet.
pub(crate) async fn hello(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let mut protocol = ctx.client.protocol;
    let mut logged_in = false;
    if args.remaining() > 0 {
        let version = args.next_i64().map_err(|_| {
            CmdError::Reply("ERR Protocol version is not an integer or out of range".into())
        })?;
        protocol = match version {
            2 => crate::Protocol::Resp2,
            3 => crate::Protocol::Resp3,
            _ => {
                return Err(CmdError::Reply(
                    "NOPROTO sorry, this protocol version is not supported".into(),
                ));
            }
        };
        while args.remaining() > 0 {
            if args.next_keyword("setname") {
                ctx.client.name = Some(args.next_bytes()?);
            } else if args.next_keyword("auth") {
                let user = args.next_bytes()?;
                let secret = args.next_bytes()?;
                if ctx.shared.node.acl_enabled() {
                    log_in(ctx, &secret).await?;
                    logged_in = true;
                } else {
                    check_user(&user)?;
                }
            } else {
                return Err(CmdError::Reply("ERR Syntax error in HELLO option".into()));
            }
        }
    }
    // As Redis with a password: an unauthenticated HELLO without AUTH is refused, so a
    // client that forgot its password learns it at connect.
    if !logged_in && ctx.client.token.is_none() && must_log_in(ctx) {
        return Err(CmdError::Reply(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into(),
        ));
    }
    // The answer already comes in the protocol asked for.
    ctx.client.protocol = protocol;
    let node = &ctx.shared.node;
    let proto = match protocol {
        crate::Protocol::Resp2 => 2,
        crate::Protocol::Resp3 => 3,
    };
    Ok(Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (
            Reply::bulk("version"),
            Reply::bulk(crate::cmd::server::REDIS_VERSION),
        ),
        (Reply::bulk("proto"), Reply::integer(proto)),
        (Reply::bulk("id"), Reply::integer(ctx.client.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("cluster")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::array(vec![])),
        (
            Reply::bulk("trireme-node"),
            Reply::bulk(node.me().name.clone()),
        ),
    ]))
}

pub(crate) fn select(args: &mut Args) -> CmdResult {
    let db = args.next_i64()?;
    super::no_more(args)?;
    if db != 0 {
        return Err(CmdError::Reply("ERR DB index is out of range".into()));
    }
    Ok(Reply::ok())
}

fn no_password() -> &'static str {
    "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
}

/// With no password configured, Redis's `default` user takes any password; no other user
/// exists. Clients that always log in as `default` (`redis://default:pw@host`) connect.
fn check_user(user: &[u8]) -> Result<(), CmdError> {
    if user == b"default" {
        Ok(())
    } else {
        Err(CmdError::Reply(WRONGPASS.into()))
    }
}

/// Whether ACLs make an anonymous connection log in before anything else (default deny).
fn must_log_in(ctx: &Ctx<'_>) -> bool {
    let node = &ctx.shared.node;
    node.acl_enabled()
        && node.config().acl.default_policy == trireme_types::acl::DefaultPolicy::Deny
}

/// Failed `AUTH`s a connection may make at full speed; later ones are answered after
/// [`AUTH_FAILURE_DELAY`], and past [`MAX_AUTH_FAILURES`] the connection is closed.
const FREE_AUTH_FAILURES: u32 = 3;
const AUTH_FAILURE_DELAY: std::time::Duration = std::time::Duration::from_millis(250);
const MAX_AUTH_FAILURES: u32 = 10;

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// With ACLs on: makes `secret` this connection's token if a token has it. The user name is
/// not checked (the secret names the token), so `AUTH default <secret>` works too.
async fn log_in(ctx: &mut Ctx<'_>, secret: &[u8]) -> Result<(), CmdError> {
    let known = std::str::from_utf8(secret)
        .ok()
        .filter(|s| !s.is_empty())
        .filter(|s| ctx.shared.node.resolve_token(Some(s)).is_ok());
    match known {
        Some(secret) => {
            ctx.client.token = Some(std::sync::Arc::from(secret));
            ctx.client.auth_failures = 0;
            Ok(())
        }
        None => {
            ctx.client.auth_failures += 1;
            if ctx.client.auth_failures > MAX_AUTH_FAILURES {
                return Err(CmdError::Close(
                    "ERR too many failed AUTH attempts; closing the connection".into(),
                ));
            }
            if ctx.client.auth_failures > FREE_AUTH_FAILURES {
                tokio::time::sleep(AUTH_FAILURE_DELAY).await;
            }
            Err(CmdError::Reply(WRONGPASS.into()))
        }
    }
}

/// `AUTH password` and `AUTH user password`: with ACLs on, the password is a token's
/// secret; with them off, no password is configured (as a Redis without `requirepass`).
pub(crate) async fn auth(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let first = args.next_bytes()?;
    if ctx.shared.node.acl_enabled() {
        let secret = match args.remaining() {
            0 => first,
            1 => args.next_bytes()?,
            _ => return Err(crate::ArgError::Syntax.into()),
        };
        log_in(ctx, &secret).await?;
        return Ok(Reply::ok());
    }
    match args.remaining() {
        0 => Err(CmdError::Reply(no_password().into())),
        1 => {
            args.next_bytes()?;
            check_user(&first)?;
            Ok(Reply::ok())
        }
        _ => Err(crate::ArgError::Syntax.into()),
    }
}

/// `CLIENT SETNAME | GETNAME | ID | SETINFO | INFO`.
pub(crate) fn client(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let sub = args.next_str()?.to_ascii_lowercase();
    match sub.as_str() {
        "setname" => {
            let name = args.next_bytes()?;
            args.finish()?;
            if name.iter().any(|b| *b <= b' ' || *b > b'~') {
                return Err(CmdError::Reply(
                    "ERR Client names cannot contain spaces, newlines or special characters."
                        .into(),
                ));
            }
            ctx.client.name = (!name.is_empty()).then_some(name);
            Ok(Reply::ok())
        }
        "getname" => {
            args.finish()?;
            Ok(ctx.client.name.clone().map_or(Reply::Null, Reply::Bulk))
        }
        "id" => {
            args.finish()?;
            Ok(Reply::integer(ctx.client.id as i64))
        }
        "setinfo" => {
            args.next_bytes()?;
            args.next_bytes()?;
            args.finish()?;
            Ok(Reply::ok())
        }
        "info" => {
            args.finish()?;
            let name = ctx
                .client
                .name
                .as_ref()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default();
            Ok(Reply::Verbatim(format!(
                "id={} name={} db=0\n",
                ctx.client.id, name
            )))
        }
        _ => Err(CmdError::Reply(format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            sub.chars().take(64).collect::<String>()
        ))),
    }
}
