//! SHOW ADVICE: the pool advisor's findings (`advice/`).

use std::sync::Arc;

use super::result::{text, Col, ResultSet};
use crate::app::App;

pub const ADVICE_COLUMNS: &[(&str, Col)] = &[
    ("database", Col::Text),
    ("user", Col::Text),
    ("rule", Col::Text),
    ("evidence", Col::Text),
    ("change", Col::Text),
];

/// SHOW ADVICE: the pool advisor's findings (`advice`), one row each.
pub fn advice(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(ADVICE_COLUMNS);
    for f in crate::advice::findings(app) {
        rs.push(vec![
            text(f.database),
            text(f.user),
            text(f.rule),
            text(f.evidence),
            text(f.change),
        ]);
    }
    rs
}
