//! docs/configuration.md is generated from the settings table; this keeps the two equal.
//! Regenerate with `SLUICE_BLESS=1 cargo test -p sluice-config --test docs_in_sync`.

#[test]
fn configuration_doc_matches_the_settings_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let want = sluice_config::settings_markdown();
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "docs/configuration.md is out of date: run SLUICE_BLESS=1 cargo test -p sluice-config --test docs_in_sync"
    );
}
