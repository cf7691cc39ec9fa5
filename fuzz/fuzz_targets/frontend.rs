//! Frontend messages Sluice inspects, as a stream of tagged messages: Query, Parse, Bind,
//! Describe, Close, Execute (header only: Sluice never decodes its body), PasswordMessage and
//! SASLInitialResponse ('p'). Every decoded message re-encodes to the same view or bytes.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_fuzz::messages;
use sluice_protocol::{
    decode_bind, decode_bind_params, decode_describe_or_close, decode_parse, decode_password, decode_query,
    decode_sasl_initial, encode_close, encode_describe, encode_parse, encode_password,
    encode_query, encode_sasl_initial, frontend_tag as tag,
};

fuzz_target!(|data: &[u8]| {
    for (t, body, whole) in messages(data) {
        let mut out = BytesMut::new();
        match t {
            tag::QUERY => {
                if let Ok(sql) = decode_query(body) {
                    encode_query(sql, &mut out);
                    assert_eq!(&out[..], whole);
                }
            }
            tag::PARSE => {
                if let Ok(p) = decode_parse(body) {
                    encode_parse(p.name, p.query, &p.param_types, &mut out);
                    assert_eq!(&out[..], whole);
                }
            }
            tag::BIND => {
                if let Ok(b) = decode_bind(body) {
                    assert!(b.rest_offset <= body.len());
                    assert_eq!(b.rest_offset, b.portal.len() + b.statement.len() + 2);
                }
                if let Ok(p) = decode_bind_params(body) {
                    // Every value lies inside the body; a NULL is not a value.
                    let sum: usize = p.values.iter().flatten().map(|v| v.len()).sum();
                    assert!(sum <= body.len());
                    let names = decode_bind(body).expect("the names of a whole Bind");
                    assert_eq!((names.portal, names.statement), (p.portal, p.statement));
                    for i in 0..p.values.len() {
                        let _ = p.is_binary(i);
                    }
                }
            }
            tag::DESCRIBE | tag::CLOSE => {
                if let Ok((kind, name)) = decode_describe_or_close(body) {
                    if t == tag::DESCRIBE {
                        encode_describe(kind, name, &mut out);
                    } else {
                        encode_close(kind, name, &mut out);
                    }
                    assert_eq!(&out[..], whole);
                }
            }
            tag::PASSWORD => {
                if let Ok(pw) = decode_password(body) {
                    encode_password(pw, &mut out);
                    assert_eq!(&out[..], whole);
                }
                if let Ok(s) = decode_sasl_initial(body) {
                    out.clear();
                    encode_sasl_initial(s.mechanism, s.data, &mut out);
                    let again = decode_sasl_initial(&out[5..]).expect("re-encoded SASL initial");
                    assert_eq!(again, s);
                }
            }
            _ => {
                // Everything else (Execute, Sync, CopyData, ...) is relayed by its header alone.
            }
        }
    }
});
