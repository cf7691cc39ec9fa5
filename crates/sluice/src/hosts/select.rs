//! Which hosts of a list a new server may try, in which order, for a target_session_attrs: pure,
//! over the checker's views. Hosts out of rotation are never tried; hosts not checked yet are
//! tried last (their login tells their role).

use sluice_config::TargetSessionAttrs;

use super::view::{HostView, Role};

/// How a host the checker knows fits a target_session_attrs.
fn fits(attrs: TargetSessionAttrs, v: &HostView) -> bool {
    let standby = v.role == Role::Standby;
    match attrs {
        TargetSessionAttrs::Any | TargetSessionAttrs::PreferStandby => true,
        TargetSessionAttrs::ReadWrite => v.role == Role::Primary && !v.read_only,
        TargetSessionAttrs::ReadOnly => standby || v.read_only,
        TargetSessionAttrs::Primary => v.role == Role::Primary,
        TargetSessionAttrs::Standby => standby,
    }
}

/// Indexes of `views` to try, best first. `start` rotates each class (round-robin); with
/// `load_balance_hosts=disable` the caller passes 0 and list order stands.
pub fn candidates(views: &[&HostView], attrs: TargetSessionAttrs, start: usize) -> Vec<usize> {
    let n = views.len();
    let rotated = (0..n).map(|k| (start + k) % n);
    let known: Vec<usize> = rotated
        .clone()
        .filter(|&i| views[i].checked && views[i].healthy && fits(attrs, views[i]))
        .collect();
    let unknown = rotated.filter(|&i| !views[i].checked);
    let mut out: Vec<usize> = if attrs == TargetSessionAttrs::PreferStandby {
        let standbys = known.iter().filter(|&&i| views[i].role == Role::Standby);
        let others = known.iter().filter(|&&i| views[i].role != Role::Standby);
        standbys.chain(others).copied().collect()
    } else {
        known
    };
    out.extend(unknown);
    out
}

/// Why host `v` is not tried for `attrs` (None: it is).
pub fn passed_over(attrs: TargetSessionAttrs, v: &HostView) -> Option<String> {
    if !v.checked {
        return None;
    }
    if !v.healthy {
        return Some(
            v.out_reason
                .clone()
                .unwrap_or_else(|| "out of rotation".into()),
        );
    }
    (!fits(attrs, v)).then(|| {
        let what = match (v.role, v.read_only) {
            (Role::Standby, _) => "a standby",
            (Role::Primary, true) => "a read-only primary",
            (Role::Primary, false) => "a primary",
            (Role::Unknown, _) => "of unknown role",
        };
        format!("is {what}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use TargetSessionAttrs as A;

    fn host(role: Role, healthy: bool) -> HostView {
        HostView {
            role,
            read_only: role == Role::Standby,
            checked: role != Role::Unknown,
            healthy,
            ..HostView::default()
        }
    }

    #[test]
    fn by_role() {
        let hosts = [
            host(Role::Standby, true),
            host(Role::Primary, true),
            host(Role::Standby, true),
            host(Role::Unknown, false),
            host(Role::Primary, false),
        ];
        let v: Vec<&HostView> = hosts.iter().collect();
        assert_eq!(candidates(&v, A::ReadWrite, 0), [1, 3]);
        assert_eq!(candidates(&v, A::Primary, 0), [1, 3]);
        assert_eq!(candidates(&v, A::Standby, 0), [0, 2, 3]);
        assert_eq!(candidates(&v, A::ReadOnly, 1), [2, 0, 3]);
        assert_eq!(candidates(&v, A::PreferStandby, 1), [2, 0, 1, 3]);
        assert_eq!(candidates(&v, A::Any, 2), [2, 0, 1, 3]);
        assert_eq!(
            passed_over(A::ReadWrite, &hosts[0]).unwrap(),
            "is a standby"
        );
        assert_eq!(passed_over(A::ReadWrite, &hosts[1]), None);
        assert_eq!(passed_over(A::ReadWrite, &hosts[3]), None);
        assert_eq!(
            passed_over(A::ReadWrite, &hosts[4]).unwrap(),
            "out of rotation"
        );
    }

    #[test]
    fn nothing_fits_while_the_primary_is_away() {
        let hosts = [host(Role::Primary, false), host(Role::Standby, true)];
        let v: Vec<&HostView> = hosts.iter().collect();
        assert!(candidates(&v, A::ReadWrite, 0).is_empty());
        assert_eq!(candidates(&v, A::PreferStandby, 0), [1]);
    }
}
