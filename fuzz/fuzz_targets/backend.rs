//! Backend messages Sluice inspects, as a stream of tagged messages: Authentication* (incl. SASL),
//! ParameterStatus, BackendKeyData, ReadyForQuery, ErrorResponse/NoticeResponse, CommandComplete,
//! RowDescription, DataRow and NegotiateProtocolVersion. Every decoded message re-encodes to the
//! same bytes or, where the decoder drops detail, to a message that decodes the same.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_fuzz::messages;
use sluice_protocol::{
    backend_tag as tag, decode_authentication, decode_backend_key_data, decode_command_complete,
    decode_data_row, decode_error_fields, decode_negotiate_protocol_version,
    decode_parameter_status, decode_ready_for_query, decode_row_description, encode_auth_cleartext,
    encode_auth_md5, encode_auth_ok, encode_auth_sasl, encode_auth_sasl_continue,
    encode_auth_sasl_final, encode_backend_key_data, encode_command_complete, encode_data_row,
    encode_error_fields, encode_negotiate_protocol_version, encode_parameter_status,
    encode_ready_for_query, encode_row_description, Authentication,
};

fuzz_target!(|data: &[u8]| {
    for (t, body, whole) in messages(data) {
        let mut out = BytesMut::new();
        match t {
            tag::AUTHENTICATION => {
                let Ok(auth) = decode_authentication(body) else {
                    continue;
                };
                match &auth {
                    Authentication::Ok => encode_auth_ok(&mut out),
                    Authentication::CleartextPassword => encode_auth_cleartext(&mut out),
                    Authentication::Md5Password { salt } => encode_auth_md5(*salt, &mut out),
                    Authentication::Sasl { mechanisms } => encode_auth_sasl(mechanisms, &mut out),
                    Authentication::SaslContinue(d) => encode_auth_sasl_continue(d, &mut out),
                    Authentication::SaslFinal(d) => encode_auth_sasl_final(d, &mut out),
                    Authentication::Other(_) => continue,
                }
                assert_eq!(&out[..], whole);
            }
            tag::PARAMETER_STATUS => {
                if let Ok((k, v)) = decode_parameter_status(body) {
                    encode_parameter_status(k, v, &mut out);
                    assert_eq!(&out[..], whole);
                }
            }
            tag::BACKEND_KEY_DATA => {
                if let Ok(key) = decode_backend_key_data(body) {
                    encode_backend_key_data(key, &mut out);
                    assert_eq!(&out[..], whole);
                }
            }
            tag::READY_FOR_QUERY => {
                if let Ok(status) = decode_ready_for_query(body) {
                    encode_ready_for_query(status, &mut out);
                    assert_eq!(&out[..], whole);
                }
            }
            tag::ERROR_RESPONSE | tag::NOTICE_RESPONSE => {
                if let Ok(f) = decode_error_fields(body) {
                    encode_error_fields(t, &f, &mut out);
                    let again = decode_error_fields(&out[5..]).expect("re-encoded error");
                    // A body without fields is re-encoded with empty standard ones; what the
                    // pooler reads from it stays the same.
                    let named = |e: &sluice_protocol::ErrorFields| {
                        (
                            e.severity.clone(),
                            e.code.clone(),
                            e.message.clone(),
                            e.detail.clone(),
                            e.hint.clone(),
                        )
                    };
                    assert_eq!(named(&again), named(&f));
                    if !f.fields.is_empty() {
                        assert_eq!(again, f);
                    }
                }
            }
            tag::COMMAND_COMPLETE => {
                if let Ok(text) = decode_command_complete(body) {
                    encode_command_complete(text, &mut out);
                    assert_eq!(&out[..], whole);
                }
            }
            tag::ROW_DESCRIPTION => {
                if let Ok(fields) = decode_row_description(body) {
                    encode_row_description(&fields, &mut out);
                    let again = decode_row_description(&out[5..]).expect("re-encoded row desc");
                    assert_eq!(again, fields);
                }
            }
            tag::DATA_ROW => {
                if let Ok(values) = decode_data_row(body) {
                    encode_data_row(&values, &mut out);
                    assert_eq!(&out[..], whole);
                }
            }
            tag::NEGOTIATE_PROTOCOL_VERSION => {
                if let Ok((minor, options)) = decode_negotiate_protocol_version(body) {
                    assert!(minor <= 0xffff);
                    encode_negotiate_protocol_version(minor, &options, &mut out);
                    let again = decode_negotiate_protocol_version(&out[5..]).expect("re-encoded");
                    assert_eq!(again, (minor, options));
                }
            }
            _ => {}
        }
    }
});
