//! Asking another worker and answering it: a request for another shard waits
//! in a slab for its answer (abandoned if its asker goes away), and the
//! requests of other workers are served here as the owner.

use super::*;

/// A request sent to another worker, waiting for its answer.
pub(super) struct Waiting {
    /// `ShardRequest::requests` of what was sent.
    requests: usize,
    reply: Option<ShardReply>,
    waker: Option<Waker>,
    /// The asker stopped waiting (its connection went away): drop the answer.
    abandoned: bool,
}

impl Shard {
    /// Sends `request` to `owner` (waiting for room in the channel if it is
    /// full: that wait is the back-pressure) and returns its pending answer.
    pub(super) async fn ask(
        &self,
        owner: usize,
        request: ShardRequest,
    ) -> Result<PendingReply<'_>, RouteError> {
        let senders = self.to_owners.as_ref().ok_or(RouteError::OwnerGone)?;
        let requests = request.requests();
        let token = {
            let mut waiting = self.waiting.borrow_mut();
            // Metrics (no requests) still count one against the limit. A
            // batch larger than the limit still goes when nothing waits.
            let before = self.waiting_requests.get();
            if before > 0 && before + requests.max(1) > self.max_waiting {
                self.stats.overloaded.add(requests.max(1) as u64);
                return Err(RouteError::Overloaded);
            }
            self.waiting_requests.set(before + requests);
            waiting.insert(Waiting {
                requests,
                reply: None,
                waker: None,
                abandoned: false,
            })
        };
        // From here the guard frees the slot whatever happens.
        let mut pending = PendingReply {
            shard: self,
            token,
            sent: false,
        };
        // Scrapes of the metrics are not traffic for a torrent.
        self.stats.forwarded.add(requests as u64);
        let envelope = Envelope {
            token: token as u32,
            body: request,
        };
        match senders.try_send_to(owner, envelope) {
            Ok(()) => {}
            Err(GlommioError::WouldBlock(ResourceType::Channel(envelope))) => {
                self.stats.backpressure_waits.inc();
                senders
                    .send_to(owner, envelope)
                    .await
                    .map_err(|_| RouteError::OwnerGone)?;
            }
            Err(_) => return Err(RouteError::OwnerGone),
        }
        pending.sent = true;
        Ok(pending)
    }

    /// Answers a request from another worker; None for one-way messages.
    pub(super) fn serve(&self, request: ShardRequest) -> Option<ShardReply> {
        Some(match request {
            ShardRequest::Announce(req) => {
                let mut peers = AnswerPeers::default();
                let answer = self
                    .announce_local(&req, &mut peers)
                    .map(|c| AnnounceAnswer {
                        seeders: c.seeders,
                        leechers: c.leechers,
                        peers,
                    });
                ShardReply::Announce(answer)
            }
            ShardRequest::Announces(batch) => {
                self.prefetch(batch.iter().map(|a| (a.info_hash, a.peer_addr)));
                let mut answers = AnnounceAnswers {
                    answers: Vec::with_capacity(batch.len()),
                    compact: Vec::new(),
                };
                let mut peers = self.peers_scratch.borrow_mut();
                for req in &batch {
                    debug_assert!(!req.peer_ids, "a batch's answers keep no peer ids");
                    let outcome = self.announce_local(req, &mut peers);
                    answers.push(outcome, &peers);
                }
                ShardReply::Announces(answers)
            }
            ShardRequest::Scrape(swarms, hashes) => {
                ShardReply::Scrape(self.scrape_here(swarms, &hashes))
            }
            ShardRequest::ScrapeSome(swarms, max) => {
                let mut counts = Vec::new();
                self.scrape_some_here(swarms, max, &mut counts);
                ShardReply::ScrapeSome(counts)
            }
            ShardRequest::Metrics => {
                let mut samples = Vec::new();
                self.samples(&mut samples);
                ShardReply::Metrics(samples)
            }
            ShardRequest::PrivateAnnounce(request) => self.serve_private(&request),
            ShardRequest::PrivateQuery(query) => {
                ShardReply::PrivateQuery(self.private_query_here(query))
            }
            ShardRequest::RtcAnnounce(request) => {
                ShardReply::RtcAnnounce(self.rtc_announce_local(*request))
            }
            ShardRequest::Relays(relays) => {
                self.take_relays(relays);
                return None;
            }
            ShardRequest::RtcGone(peers) => {
                self.rtc_disconnected(peers);
                return None;
            }
        })
    }

    /// Frees the slot of a request that no longer waits.
    fn forget(&self, waiting: &mut Slab<Waiting>, token: usize) {
        if let Some(slot) = waiting.try_remove(token) {
            self.waiting_requests
                .set(self.waiting_requests.get() - slot.requests);
        }
    }

    /// Hands an answer from an owner to the request waiting for it.
    pub(super) fn deliver(&self, token: u32, reply: ShardReply) {
        let mut waiting = self.waiting.borrow_mut();
        let Some(slot) = waiting.get_mut(token as usize) else {
            return;
        };
        if slot.abandoned {
            self.forget(&mut waiting, token as usize);
            return;
        }
        slot.reply = Some(reply);
        if let Some(waker) = slot.waker.take() {
            waker.wake();
        }
    }
}

/// The answer to a request sent to another worker. Dropping it before the
/// answer came marks the slot abandoned, so the late answer is thrown away.
pub(super) struct PendingReply<'a> {
    shard: &'a Shard,
    token: usize,
    sent: bool,
}

impl Future for PendingReply<'_> {
    type Output = Result<ShardReply, RouteError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let token = self.token;
        let mut waiting = self.shard.waiting.borrow_mut();
        let Some(slot) = waiting.get_mut(token) else {
            return Poll::Ready(Err(RouteError::OwnerGone));
        };
        match slot.reply.take() {
            Some(reply) => {
                self.shard.forget(&mut waiting, token);
                drop(waiting);
                self.token = usize::MAX;
                Poll::Ready(Ok(reply))
            }
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for PendingReply<'_> {
    fn drop(&mut self) {
        if self.token == usize::MAX {
            return;
        }
        let mut waiting = self.shard.waiting.borrow_mut();
        let answered = waiting
            .get(self.token)
            .is_some_and(|slot| slot.reply.is_some());
        if !self.sent || answered {
            self.shard.forget(&mut waiting, self.token);
        } else if let Some(slot) = waiting.get_mut(self.token) {
            slot.abandoned = true;
        }
    }
}
