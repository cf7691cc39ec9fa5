//! Tests of read routing: the classifier's table, the freshness rule over event sequences, and
//! a seeded random model check of the two invariants.

mod classify_random;
mod classify_table;
mod freshness_events;
mod freshness_model;
mod policy_table;
