//! pgbouncer.ini from memory (`parse_str`): sections, settings values, [databases] connect
//! strings, [users], [peers]. Inputs naming `%include` are skipped: they would read files.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.contains("%include") {
        return;
    }
    if let Ok(cfg) = sluice_config::parse_str(text, "fuzz.ini") {
        for db in &cfg.databases {
            let _ = db.target_dbname();
            let _ = db.instantiate_auto("x");
        }
        if let Some(f) = &cfg.fallback {
            let _ = f.instantiate_auto("x");
        }
    }
});
