//! How a task that never runs out of work (the UDP loop under a flood) lets
//! the rest of its worker run: it yields to the other tasks after every
//! piece of work, and to the reactor once its quantum has passed.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// How long a task that never runs out of work (the UDP loop under a flood)
/// may keep its worker from the reactor while the worker has other work: I/O
/// completions to reap (HTTP), other workers' requests and answers to take
/// off the mesh, timers to fire. glommio goes back to the reactor only when
/// every task waits, or when its preemption timer fires (every 100 ms). A
/// shorter timer would do the same, but glommio 0.9.0 then parks with tasks
/// runnable now and then (it takes a timer that fires before any task ran
/// for an idle executor). 500 µs is Seastar's task quota.
const REACTOR_QUANTUM: Duration = Duration::from_micros(500);

/// The quantum once the worker has had no other work for
/// [`OTHER_WORK_WINDOW`]: then turns of the reactor serve only timers, and a
/// turn costs 10-20 µs of glommio's bookkeeping (timer cancels and arms).
const LONE_REACTOR_QUANTUM: Duration = Duration::from_millis(8);

/// How long the worker counts as having other work after the reactor last
/// woke some (so that sparse HTTP requests keep the short quantum too).
const OTHER_WORK_WINDOW: Duration = Duration::from_millis(100);

/// The first timer tried for a turn of the reactor (see `Quantum::yield_now`).
const REACTOR_TIMER: Duration = Duration::from_nanos(100);

thread_local! {
    /// Waits of this worker's tasks that the reactor ended (see [`waited`]).
    static REACTOR_WAKES: Cell<u64> = const { Cell::new(0) };
}

/// Awaits `future`, and says whether it had to wait. One that did was woken
/// by the reactor (an I/O completion, a message on the mesh), and is counted
/// as the worker's other work for every [`Quantum`] on it.
pub async fn waited<F: Future>(future: F) -> (F::Output, bool) {
    let mut future = std::pin::pin!(future);
    let mut waited = false;
    let output = futures_lite::future::poll_fn(|cx| {
        let poll = future.as_mut().poll(cx);
        waited |= poll.is_pending();
        poll
    })
    .await;
    if waited {
        REACTOR_WAKES.set(REACTOR_WAKES.get() + 1);
    }
    (output, waited)
}

/// A busy task's turn on its worker: yields to the other tasks after every
/// piece of work, and to the reactor once the quantum has passed since the
/// task last waited on it. The quantum is [`REACTOR_QUANTUM`], or
/// [`LONE_REACTOR_QUANTUM`] while the worker has no other work.
pub struct Quantum {
    started: Instant,
    length: Duration,
    /// `REACTOR_WAKES` when the last turn began, plus this task's own waits
    /// since: more than this means others were woken.
    wakes: u64,
    /// When a turn last found that the reactor had woken others.
    other_work: Instant,
}

impl Default for Quantum {
    fn default() -> Self {
        let now = Instant::now();
        Quantum {
            started: now,
            length: REACTOR_QUANTUM,
            wakes: REACTOR_WAKES.get(),
            other_work: now,
        }
    }
}

impl Quantum {
    /// Lets the worker's other tasks run; once the quantum is spent, waits
    /// for the reactor to go round too.
    pub async fn yield_now(&mut self) {
        if self.started.elapsed() < self.length {
            // Back of the run queue: tasks already woken run, the reactor not.
            futures_lite::future::yield_now().await;
            return;
        }
        let wakes = REACTOR_WAKES.get();
        if wakes != self.wakes {
            self.wakes = wakes;
            self.other_work = Instant::now();
        }
        self.length = if self.other_work.elapsed() < OTHER_WORK_WINDOW {
            REACTOR_QUANTUM
        } else {
            LONE_REACTOR_QUANTUM
        };
        // A timer is fired by the reactor, so waiting on one takes the task
        // off the run queue until the reactor has gone round: reaped
        // completions, shared channels and timers. The shortest that is still
        // pending when first polled, so that it is due by the time the
        // executor runs out of tasks; one still pending then would make the
        // executor sleep on it, which costs several times more.
        let mut delay = REACTOR_TIMER;
        let mut timer = glommio::timer::Timer::new(delay);
        let mut charged = false;
        futures_lite::future::poll_fn(|cx| {
            if charged {
                // Woken, and only the reactor holds the waker.
                return Poll::Ready(());
            }
            while Pin::new(&mut timer).poll(cx).is_ready() {
                delay *= 2;
                timer = glommio::timer::Timer::new(delay);
            }
            charged = true;
            Poll::Pending
        })
        .await;
        self.started = Instant::now();
    }

    /// Awaits `future`, which the task has nothing to do without (see
    /// [`waited`]); after a wait a new quantum starts. The task's own wait
    /// is other work for the worker's other quanta, not for this one.
    pub async fn wait<F: Future>(&mut self, future: F) -> F::Output {
        let (output, waited) = waited(future).await;
        if waited {
            self.started = Instant::now();
            self.wakes += 1;
        }
        output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{allowed_cpus, run_workers, WorkerPlacement};

    #[test]
    fn a_task_that_always_has_work_lets_timers_fire_within_its_quantum() {
        let placements = vec![WorkerPlacement::Unpinned(allowed_cpus().unwrap())];
        let late = run_workers(placements, Duration::ZERO, |_| async move {
            let done = std::rc::Rc::new(std::cell::Cell::new(false));
            let busy = glommio::spawn_local({
                let done = done.clone();
                async move {
                    let mut quantum = Quantum::default();
                    while !done.get() {
                        let work = Instant::now();
                        while work.elapsed() < Duration::from_micros(20) {}
                        quantum.yield_now().await;
                    }
                }
            });
            // Without a turn for the reactor the timer would wait for
            // glommio's preemption timer: 100 ms.
            let mut late = Duration::ZERO;
            for _ in 0..20 {
                let asked = Instant::now();
                glommio::timer::sleep(Duration::from_millis(1)).await;
                late = late.max(asked.elapsed() - Duration::from_millis(1));
            }
            done.set(true);
            busy.await;
            Ok(late)
        })
        .unwrap();
        assert!(late[0] < Duration::from_millis(50), "{late:?}");
    }

    #[test]
    fn only_a_wait_on_the_reactor_starts_a_new_quantum() {
        let placements = vec![WorkerPlacement::Unpinned(allowed_cpus().unwrap())];
        run_workers(placements, Duration::ZERO, |_| async move {
            let spent = Instant::now() - REACTOR_QUANTUM * 2;
            let mut quantum = Quantum {
                started: spent,
                ..Quantum::default()
            };
            quantum.wait(async {}).await;
            assert_eq!(quantum.started, spent, "a ready future is no wait");
            quantum
                .wait(glommio::timer::sleep(Duration::from_micros(10)))
                .await;
            assert!(quantum.started.elapsed() < REACTOR_QUANTUM);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn the_quantum_is_long_while_the_worker_has_no_other_work() {
        let placements = vec![WorkerPlacement::Unpinned(allowed_cpus().unwrap())];
        run_workers(placements, Duration::ZERO, |_| async move {
            let mut quantum = Quantum::default();
            let turn = async |quantum: &mut Quantum| {
                quantum.started = Instant::now() - quantum.length;
                quantum.yield_now().await;
                quantum.length
            };
            assert_eq!(turn(&mut quantum).await, REACTOR_QUANTUM);
            quantum.other_work = Instant::now() - OTHER_WORK_WINDOW;
            assert_eq!(turn(&mut quantum).await, LONE_REACTOR_QUANTUM);
            // Its own waits are not other work.
            quantum
                .wait(glommio::timer::sleep(Duration::from_micros(10)))
                .await;
            assert_eq!(turn(&mut quantum).await, LONE_REACTOR_QUANTUM);
            // Another task's wait ends on the reactor: other work again.
            let other =
                glommio::spawn_local(waited(glommio::timer::sleep(Duration::from_micros(10))));
            assert!(other.await.1);
            assert_eq!(turn(&mut quantum).await, REACTOR_QUANTUM);
            Ok(())
        })
        .unwrap();
    }
}
