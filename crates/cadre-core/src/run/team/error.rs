//! Why a team change was refused.

/// Why a team change was refused: the calling agent gets this as an `is_error`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TeamError {
    /// No member has that name.
    #[error("there is no member named {name:?}; the members are: {known}")]
    UnknownMember {
        /// The name asked for.
        name: String,
        /// The members there are.
        known: String,
    },
    /// The name is taken.
    #[error("a member named {name:?} already exists; choose another name")]
    NameTaken {
        /// The name asked for.
        name: String,
    },
    /// The name is not one cadre takes.
    #[error("{name:?} is not a usable member name: use 1 to 64 letters, digits, '-' or '_'")]
    BadName {
        /// The name asked for.
        name: String,
    },
    /// The run has as many members as it may.
    #[error("refused: the run already has {0} members (its limit); close one (CloseMember) or give the work to an existing member")]
    TooManyMembers(usize),
    /// The recipient was closed.
    #[error("{name} was closed and takes no more messages")]
    Closed {
        /// The recipient's name.
        name: String,
    },
    /// A member wrote to itself.
    #[error("a member cannot send a message to itself")]
    ToSelf,
    /// The message is too long.
    #[error("the message is {size} bytes; the limit is {limit}: shorten it, or put the details in a file and send its path")]
    TooLong {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The recipient's inbox is full.
    #[error("{name}'s inbox is full ({limit} unread messages): wait until it has read them before sending more")]
    InboxFull {
        /// The recipient.
        name: String,
        /// The limit.
        limit: usize,
    },
    /// The run's cap on messages is reached.
    #[error("this run has reached its cap of {0} messages: no more messages can be sent. Finish your part with what you have and answer")]
    Cap(usize),
    /// No task has that id.
    #[error("there is no task #{id}; the tasks are: {known}")]
    UnknownTask {
        /// The id asked for.
        id: u32,
        /// The ids there are.
        known: String,
    },
    /// Another member owns the task.
    #[error("task #{id} is owned by {owner}; only its owner can change it")]
    Owned {
        /// The task.
        id: u32,
        /// Its owner.
        owner: String,
    },
    /// The task is completed already.
    #[error("task #{0} is already completed")]
    Done(u32),
    /// The task is blocked.
    #[error("task #{id} cannot be started: it is blocked by {blockers}, not completed yet")]
    Blocked {
        /// The task.
        id: u32,
        /// The tasks blocking it, with their status.
        blockers: String,
    },
    /// Only the member that started another may close it.
    #[error("{name} was started by {starter}; only its starter may close it")]
    NotStarter {
        /// The member.
        name: String,
        /// Its starter.
        starter: String,
    },
}
