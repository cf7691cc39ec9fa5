//! Grammar of the four SCRAM messages (RFC 5802 §7), parsed strictly and without panicking.

use super::channel_binding::Gs2Flag;
use super::{b64_32, b64_decode};
use crate::error::ProtocolError;

const MALFORMED: ProtocolError = ProtocolError::Scram("malformed message");

/// The parts of a client-first-message the server needs.
pub(crate) struct ClientFirst<'a> {
    /// "n,,", "y,," or "p=<cb-name>,," exactly as sent; the client echoes it in `c=`.
    pub gs2_header: &'a str,
    pub flag: Gs2Flag<'a>,
    /// client-first-message-bare, part of the AuthMessage.
    pub bare: &'a str,
    pub nonce: &'a str,
}

pub(crate) struct ServerFirst<'a> {
    pub nonce: &'a str,
    pub salt: Vec<u8>,
    pub iterations: u32,
}

pub(crate) struct ClientFinal<'a> {
    pub channel_binding: Vec<u8>,
    pub nonce: &'a str,
    pub proof: [u8; 32],
    /// client-final-message-without-proof, part of the AuthMessage.
    pub without_proof: &'a str,
}

pub(crate) enum ServerFinal {
    Verifier([u8; 32]),
    Error,
}

pub(crate) fn as_text(msg: &[u8]) -> Result<&str, ProtocolError> {
    std::str::from_utf8(msg).map_err(|_| ProtocolError::Scram("message is not valid UTF-8"))
}

/// `part` must be `<name>=<value>`; returns the value.
fn attr(part: Option<&str>, name: char) -> Result<&str, ProtocolError> {
    part.and_then(|p| p.strip_prefix(name))
        .and_then(|p| p.strip_prefix('='))
        .ok_or(MALFORMED)
}

/// printable = %x21-2B / %x2D-7E (no comma), non-empty.
fn check_nonce(nonce: &str) -> Result<(), ProtocolError> {
    let ok = !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',');
    if ok {
        Ok(())
    } else {
        Err(ProtocolError::Scram("invalid nonce"))
    }
}

/// saslname: no NUL, and '=' only as "=2C" or "=3D".
fn check_saslname(name: &str) -> Result<(), ProtocolError> {
    let b = name.as_bytes();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            0 => return Err(MALFORMED),
            b'=' => match b.get(i + 1..i + 3) {
                Some(b"2C") | Some(b"3D") => i += 3,
                _ => return Err(MALFORMED),
            },
            _ => i += 1,
        }
    }
    Ok(())
}

/// Escapes a user name into a saslname.
pub(crate) fn escape_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// extensions = attr-val *("," attr-val); attr-val = ALPHA "=" value. Returns an error for
/// the first one that does not match.
fn check_extensions<'a>(parts: impl Iterator<Item = &'a str>) -> Result<(), ProtocolError> {
    for p in parts {
        let mut b = p.bytes();
        let ok = b.next().is_some_and(|c| c.is_ascii_alphabetic()) && b.next() == Some(b'=');
        if !ok {
            return Err(MALFORMED);
        }
    }
    Ok(())
}

pub(crate) fn parse_client_first(msg: &str) -> Result<ClientFirst<'_>, ProtocolError> {
    let mut it = msg.splitn(3, ',');
    let flag = it.next().unwrap_or_default();
    let authzid = it.next().ok_or(MALFORMED)?;
    let bare = it.next().ok_or(MALFORMED)?;
    let gs2_flag = Gs2Flag::parse(flag)?;
    if !authzid.is_empty() {
        return Err(ProtocolError::Scram("authorization identity not supported"));
    }
    let gs2_header = msg.get(..flag.len() + 2).ok_or(MALFORMED)?;

    let mut parts = bare.split(',').peekable();
    if parts.peek().is_some_and(|p| p.starts_with("m=")) {
        return Err(ProtocolError::Scram("mandatory extension not supported"));
    }
    // The user name is ignored (the startup packet's user is authoritative) but must be valid.
    check_saslname(attr(parts.next(), 'n')?)?;
    let nonce = attr(parts.next(), 'r')?;
    check_nonce(nonce)?;
    check_extensions(parts)?;
    Ok(ClientFirst {
        gs2_header,
        flag: gs2_flag,
        bare,
        nonce,
    })
}

pub(crate) fn parse_server_first(msg: &str) -> Result<ServerFirst<'_>, ProtocolError> {
    let mut parts = msg.split(',').peekable();
    if parts.peek().is_some_and(|p| p.starts_with("m=")) {
        return Err(ProtocolError::Scram("mandatory extension not supported"));
    }
    let nonce = attr(parts.next(), 'r')?;
    check_nonce(nonce)?;
    let salt = b64_decode(attr(parts.next(), 's')?)
        .filter(|s| !s.is_empty())
        .ok_or(ProtocolError::Scram("invalid salt"))?;
    let iter = attr(parts.next(), 'i')?;
    let iterations = Some(iter)
        .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|i| i.parse::<u32>().ok())
        .filter(|&i| i > 0)
        .ok_or(ProtocolError::Scram("invalid iteration count"))?;
    check_extensions(parts)?;
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

pub(crate) fn parse_client_final(msg: &str) -> Result<ClientFinal<'_>, ProtocolError> {
    let (without_proof, proof) = msg.rsplit_once(",p=").ok_or(MALFORMED)?;
    let proof = b64_32(proof).ok_or(ProtocolError::Scram("invalid proof"))?;
    let mut parts = without_proof.split(',');
    let channel_binding = b64_decode(attr(parts.next(), 'c')?)
        .ok_or(ProtocolError::Scram("invalid channel binding"))?;
    let nonce = attr(parts.next(), 'r')?;
    check_extensions(parts)?;
    Ok(ClientFinal {
        channel_binding,
        nonce,
        proof,
        without_proof,
    })
}

pub(crate) fn parse_server_final(msg: &str) -> Result<ServerFinal, ProtocolError> {
    let mut parts = msg.split(',');
    let first = parts.next().unwrap_or_default();
    if first.starts_with("e=") {
        return Ok(ServerFinal::Error);
    }
    let v = attr(Some(first), 'v')?;
    let sig = b64_32(v).ok_or(ProtocolError::Scram("invalid server signature"))?;
    check_extensions(parts)?;
    Ok(ServerFinal::Verifier(sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_forms() {
        let cf = parse_client_first("n,,n=user,r=abc").unwrap();
        assert_eq!(
            (cf.gs2_header, cf.bare, cf.nonce),
            ("n,,", "n=user,r=abc", "abc")
        );
        let cf = parse_client_first("y,,n=,r=abc,x=ext").unwrap();
        assert_eq!((cf.gs2_header, cf.bare), ("y,,", "n=,r=abc,x=ext"));
        assert!(parse_client_first("n,,n=a=3Db=2C,r=x").is_ok());
        let cf = parse_client_first("p=tls-server-end-point,,n=,r=abc").unwrap();
        assert_eq!(cf.gs2_header, "p=tls-server-end-point,,");
        assert_eq!(cf.flag, Gs2Flag::Used("tls-server-end-point"));
    }

    #[test]
    fn client_first_rejections() {
        let cases: &[(&str, &str)] = &[
            ("n,a=admin,n=,r=abc", "authorization identity not supported"),
            ("n,,m=ext,n=,r=abc", "mandatory extension not supported"),
            ("n,,n=,r=", "invalid nonce"),
            ("n,,n=,r=a\u{7f}", "invalid nonce"),
            ("n,,n=,r=é", "invalid nonce"),
        ];
        for (msg, why) in cases {
            assert_eq!(
                parse_client_first(msg).err(),
                Some(ProtocolError::Scram(why)),
                "{msg}"
            );
        }
        for msg in [
            "",
            "n",
            "n,",
            "n,,",
            "x,,n=,r=a",
            "n,,r=a",
            "n,,n=",
            "n,,n=a=b,r=a",
            "n,,n=,r=a,",
            "n,,n=,r=a,1=x",
            "n,,n=a=2,r=a",
        ] {
            assert_eq!(parse_client_first(msg).err(), Some(MALFORMED), "{msg}");
        }
    }

    #[test]
    fn server_first_forms() {
        let sf = parse_server_first("r=abcdef,s=c2FsdA==,i=4096").unwrap();
        assert_eq!((sf.nonce, sf.iterations), ("abcdef", 4096));
        assert_eq!(sf.salt, b"salt");
        for msg in [
            "",
            "m=x,r=a,s=c2FsdA==,i=1",
            "r=a,s=,i=1",
            "r=a,s=!!,i=1",
            "r=a,s=c2FsdA==,i=0",
            "r=a,s=c2FsdA==,i=-1",
            "r=a,s=c2FsdA==,i=+1",
            "r=a,s=c2FsdA==,i=99999999999",
            "r=a,s=c2FsdA==",
            "s=c2FsdA==,r=a,i=1",
            "r=a,s=c2FsdA==,i=1,",
        ] {
            assert!(parse_server_first(msg).is_err(), "{msg}");
        }
    }

    #[test]
    fn client_final_forms() {
        let proof = "A".repeat(43) + "=";
        let msg = format!("c=biws,r=abc,p={proof}");
        let cf = parse_client_final(&msg).unwrap();
        assert_eq!(cf.channel_binding, b"n,,");
        assert_eq!((cf.nonce, cf.without_proof), ("abc", "c=biws,r=abc"));
        assert_eq!(cf.proof, [0; 32]);
        for bad in [
            String::new(),
            format!("c=biws,r=abc,p={}", &proof[1..]),
            format!("c=biws,r=abc,p={proof},x=1"),
            format!("c=!!,r=abc,p={proof}"),
            format!("r=abc,c=biws,p={proof}"),
            format!("c=biws,p={proof}"),
            format!("c=biws,r=abc,,p={proof}"),
        ] {
            assert!(parse_client_final(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn server_final_forms() {
        let sig = "A".repeat(43) + "=";
        assert!(matches!(
            parse_server_final(&format!("v={sig}")),
            Ok(ServerFinal::Verifier(s)) if s == [0; 32]
        ));
        assert!(matches!(
            parse_server_final("e=invalid-proof"),
            Ok(ServerFinal::Error)
        ));
        assert!(parse_server_final("").is_err());
        assert!(parse_server_final("v=abc").is_err());
        assert!(parse_server_final(&format!("x={sig}")).is_err());
    }

    #[test]
    fn saslname_escaping() {
        assert_eq!(escape_saslname("a=b,c"), "a=3Db=2Cc");
        assert!(check_saslname(&escape_saslname("=,=,")).is_ok());
        assert!(check_saslname("=").is_err());
        assert!(check_saslname("a\0").is_err());
    }

    #[test]
    fn non_utf8_is_rejected() {
        assert!(as_text(b"n,,n=\xff,r=a").is_err());
        assert_eq!(as_text(b"ok").unwrap(), "ok");
    }
}
