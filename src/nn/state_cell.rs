//! [`StateCell`]: `RefCell`'s interface over state that threads may share (a layer's running
//! statistics, which `forward(&self)` updates), so models stay `Sync` as PyTorch's modules are
//! usable from any thread.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// A cell with `RefCell`'s methods (`borrow`, `borrow_mut`, `try_borrow`, `try_borrow_mut`,
/// `get_mut`, `replace`, `into_inner`) whose borrows may live on several threads: on one
/// thread it behaves as `RefCell` (a conflicting borrow is an error, or a panic for
/// `borrow`/`borrow_mut`), while a conflicting borrow held by another thread is waited for.
/// Many shared borrows, or one mutable borrow, at a time. Guards stay on the thread that took
/// them.
pub struct StateCell<T> {
    value: UnsafeCell<T>,
    holders: Mutex<Holders>,
    released: Condvar,
}

/// Who holds borrows: one entry per live shared borrow, by thread key, and the mutable one.
#[derive(Default)]
struct Holders {
    readers: Vec<u64>,
    writer: Option<u64>,
}

// SAFETY: the value is only reached through guards, which `Holders` admits as many shared or
// one mutable at a time (the rules `RwLock` keeps, with the same bounds).
unsafe impl<T: Send> Send for StateCell<T> {}
// SAFETY: as above; shared borrows on several threads need `T: Sync`, moving a mutable one's
// effects across threads `T: Send`.
unsafe impl<T: Send + Sync> Sync for StateCell<T> {}

/// A borrow of a [`StateCell`] conflicting with one this thread holds (a mutable borrow
/// while any is held, or a shared one while the mutable one is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BorrowConflict;

impl std::fmt::Display for BorrowConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the state is already borrowed on this thread in a conflicting way")
    }
}

impl std::error::Error for BorrowConflict {}

/// This thread's key (never 0).
fn thread_key() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static KEY: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    KEY.with(|k| *k)
}

impl<T> StateCell<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> StateCell<T> {
        StateCell {
            value: UnsafeCell::new(value),
            holders: Mutex::new(Holders::default()),
            released: Condvar::new(),
        }
    }

    fn holders(&self) -> MutexGuard<'_, Holders> {
        // The holders' list is updated in single steps: a panic elsewhere leaves it whole.
        self.holders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A shared borrow: waits while another thread holds the mutable one; an error while
    /// this thread does.
    pub fn try_borrow(&self) -> Result<StateRef<'_, T>, BorrowConflict> {
        let me = thread_key();
        let mut h = self.holders();
        loop {
            match h.writer {
                None => break,
                Some(w) if w == me => return Err(BorrowConflict),
                Some(_) => {
                    h = self
                        .released
                        .wait(h)
                        .unwrap_or_else(PoisonError::into_inner)
                }
            }
        }
        h.readers.push(me);
        Ok(StateRef {
            cell: self,
            key: me,
            _local: std::marker::PhantomData,
        })
    }

    /// The mutable borrow: waits while other threads hold borrows; an error while this thread
    /// holds any.
    pub fn try_borrow_mut(&self) -> Result<StateRefMut<'_, T>, BorrowConflict> {
        let me = thread_key();
        let mut h = self.holders();
        loop {
            if h.writer == Some(me) || h.readers.contains(&me) {
                return Err(BorrowConflict);
            }
            if h.writer.is_none() && h.readers.is_empty() {
                break;
            }
            h = self
                .released
                .wait(h)
                .unwrap_or_else(PoisonError::into_inner);
        }
        h.writer = Some(me);
        Ok(StateRefMut {
            cell: self,
            _local: std::marker::PhantomData,
        })
    }

    /// [`StateCell::try_borrow`], panicking on a conflict as `RefCell::borrow` does.
    #[track_caller]
    pub fn borrow(&self) -> StateRef<'_, T> {
        match self.try_borrow() {
            Ok(r) => r,
            Err(_) => panic!("already mutably borrowed (on this thread)"),
        }
    }

    /// [`StateCell::try_borrow_mut`], panicking on a conflict as `RefCell::borrow_mut` does.
    #[track_caller]
    pub fn borrow_mut(&self) -> StateRefMut<'_, T> {
        match self.try_borrow_mut() {
            Ok(r) => r,
            Err(_) => panic!("already borrowed (on this thread)"),
        }
    }

    /// The value, through exclusive access (no borrow can be live).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Puts `value` in and returns the old one ([`StateCell::borrow_mut`]'s rules).
    #[track_caller]
    pub fn replace(&self, value: T) -> T {
        std::mem::replace(&mut *self.borrow_mut(), value)
    }

    /// The value.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for StateCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.try_borrow() {
            Ok(v) => f.debug_struct("StateCell").field("value", &*v).finish(),
            Err(_) => f.write_str("StateCell { <borrowed> }"),
        }
    }
}

/// A shared borrow of a [`StateCell`] (released when dropped, on the thread that took it).
pub struct StateRef<'a, T> {
    cell: &'a StateCell<T>,
    key: u64,
    // Not Send: the release names the thread that borrowed.
    _local: std::marker::PhantomData<*const ()>,
}

impl<T> Deref for StateRef<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a shared borrow is registered, so no mutable one is live.
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> Drop for StateRef<'_, T> {
    fn drop(&mut self) {
        let mut h = self.cell.holders();
        if let Some(i) = h.readers.iter().position(|&k| k == self.key) {
            h.readers.swap_remove(i);
        }
        drop(h);
        self.cell.released.notify_all();
    }
}

/// The mutable borrow of a [`StateCell`] (released when dropped, on the thread that took it).
pub struct StateRefMut<'a, T> {
    cell: &'a StateCell<T>,
    _local: std::marker::PhantomData<*const ()>,
}

impl<T> Deref for StateRefMut<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mutable borrow is registered: no other borrow is live.
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> DerefMut for StateRefMut<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and this guard is the only one.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for StateRefMut<'_, T> {
    fn drop(&mut self) {
        self.cell.holders().writer = None;
        self.cell.released.notify_all();
    }
}
