//! The team's rules, checked under its lock: member names, task ids, and who may change a
//! task of the shared list to what.

use super::error::TeamError;
use super::state::TeamState;
use crate::vocab::team::TaskStatus;

/// Checks a member name: short, and plain enough to write in a message.
pub(super) fn check_name(name: &str) -> Result<(), TeamError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(TeamError::BadName {
            name: name.to_owned(),
        })
    }
}

/// The id of the next task of `state`'s list.
pub(super) fn next_id(state: &TeamState) -> u32 {
    state.tasks.keys().next_back().map_or(1, |n| n + 1)
}

/// The status and owner the task `id` gets when `who` asks to change it so, or why it may
/// not: the task list's rules, checked under the team's lock.
pub(super) fn check_update(
    state: &TeamState,
    who: &str,
    id: u32,
    status: Option<TaskStatus>,
    owner: Option<String>,
) -> Result<(TaskStatus, Option<String>), TeamError> {
    let Some(task) = state.tasks.get(&id) else {
        return Err(TeamError::UnknownTask {
            id,
            known: task_ids(state),
        });
    };
    let status = status.unwrap_or(task.status);
    // Starting or completing a task claims it for whoever does it, unless an owner is
    // named.
    let owner = match (owner, status) {
        (Some(o), _) if o.is_empty() => None,
        (Some(o), _) => Some(o),
        (None, TaskStatus::Pending) => task.owner.clone(),
        (None, _) => task.owner.clone().or_else(|| Some(who.to_owned())),
    };
    if let Some(o) = &owner {
        if !state.members.contains_key(o) {
            return Err(TeamError::UnknownMember {
                name: o.clone(),
                known: state.names(),
            });
        }
    }
    if let Some(current) = &task.owner {
        if current != who {
            return Err(TeamError::Owned {
                id,
                owner: current.clone(),
            });
        }
    }
    if status == TaskStatus::InProgress && task.status == TaskStatus::Completed {
        return Err(TeamError::Done(id));
    }
    if status != TaskStatus::Pending {
        let blockers: Vec<String> = task
            .blocked_by
            .iter()
            .filter_map(|b| state.tasks.get(b))
            .filter(|b| b.status != TaskStatus::Completed)
            .map(|b| format!("#{} ({})", b.id, b.status))
            .collect();
        if !blockers.is_empty() {
            return Err(TeamError::Blocked {
                id,
                blockers: blockers.join(", "),
            });
        }
    }
    Ok((status, owner))
}

/// The ids of the tasks of `state`'s list, for an error that names them.
pub(super) fn task_ids(state: &TeamState) -> String {
    if state.tasks.is_empty() {
        return "none yet".into();
    }
    state
        .tasks
        .keys()
        .map(|id| format!("#{id}"))
        .collect::<Vec<_>>()
        .join(", ")
}
