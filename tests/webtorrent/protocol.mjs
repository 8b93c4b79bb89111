#!/usr/bin/env node
// The WebSocket tracker protocol, step by step, with webtorrent's own tracker
// client (bittorrent-tracker's Client) as the peers.
//
//   node tests/webtorrent/protocol.mjs --tracker ws://127.0.0.1:6969/announce
//   node tests/webtorrent/protocol.mjs --tracker wss://localhost:6970/announce --ca ca.pem
//
// Each peer is a process of its own (this script with --peer), so that each
// has its own WebSocket: the Client shares one per tracker URL within a
// process. Their WebRTC is lib/stand-in-webrtc.mjs: fixed SDP that names the
// peer and the connection, so the script can tell that what a peer received
// is what the other sent. The peers report every frame they send and receive.
//
// Checked, in order: a seeder A and a leecher B announce `started` (with
// offers) and each hears the swarm's counts; one of B's offers reaches A
// unchanged, from B's peer_id and with B's offer_id; A's answer (to_peer_id
// B, that offer_id) reaches B unchanged; a scrape counts 1 complete and 1
// incomplete; B's `completed` makes it 2 and 0, B's `stopped` 1 and 0; a
// second torrent announced on A's connection is answered for itself, and one
// scrape of both info-hashes answers for each.
// Then messages that are not valid requests, each on a connection of its
// own: each must get an error (a `failure reason`, or a close frame with an
// error code), and a valid announce on a new connection must still be
// answered.
//
// A peer whose connection closes without `stopped` is reported under `info`,
// not checked: the protocol leaves it open.
//
// Prints one line of JSON on stdout (`ok`, and each check with what was
// seen); progress on stderr. Exit status 0 when every check passed, 1 when
// one failed or at --timeout, 2 on bad arguments.

import { fork } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const started = Date.now()
const log = (...args) => console.error(`[${((Date.now() - started) / 1000).toFixed(2)}s]`, ...args)

let opts
try {
  opts = parseArgs({
    options: {
      tracker: { type: 'string' },
      ca: { type: 'string' },
      timeout: { type: 'string', default: '30' },
      peer: { type: 'boolean', default: false }
    }
  }).values
  if (!opts.peer && !/^wss?:\/\//.test(opts.tracker || '')) throw new Error('give --tracker ws://… or wss://…')
} catch (err) {
  console.error(`protocol.mjs: ${err.message}`)
  process.exit(2)
}

// Bytes as the protocol carries them in JSON: one character per byte.
const bin = buf => Buffer.from(buf).toString('latin1')
const hex = s => Buffer.from(s, 'latin1').toString('hex')

// --- One peer, driven by the parent over the IPC channel --------------------

async function runPeer () {
  await import('./lib/use-stand-in.mjs')
  const { default: Client } = await import('bittorrent-tracker')
  const send = msg => process.send(msg)
  // The first torrent's client, and more added later: the Client shares one
  // WebSocket per tracker URL within a process, as in a browser.
  let client = null
  const clients = new Map()
  let tracker = null
  let peerId = null

  function newClient (infoHash, left) {
    const state = { left }
    const c = new Client({
      infoHash,
      peerId,
      announce: [tracker],
      port: 6881,
      getAnnounceOpts: () => ({ uploaded: 0, downloaded: 0, left: state.left })
    })
    c.state = state
    clients.set(infoHash, c)
    return c
  }

  process.on('message', msg => {
    try {
      const target = msg.infoHash ? clients.get(msg.infoHash) : client
      if (msg.cmd === 'init') {
        tracker = msg.tracker
        peerId = msg.peerId
        client = newClient(msg.infoHash, msg.left)
        client.on('update', data => send({ ev: 'update', data: pick(data, ['complete', 'incomplete']) }))
        client.on('scrape', data => send({ ev: 'scrape', data: pick(data, ['complete', 'incomplete', 'downloaded', 'infoHash']) }))
        client.on('peer', peer => send({ ev: 'peer', id: peer.id }))
        client.on('warning', err => send({ ev: 'warning', message: err.message }))
        client.on('error', err => send({ ev: 'error', message: err.message }))
        const ws = client._trackers[0]
        // What the Client sends, and what reaches it, frame by frame.
        const sendFrame = ws._send.bind(ws)
        ws._send = params => {
          send({ ev: 'sent', frame: JSON.parse(JSON.stringify(params)) })
          sendFrame(params)
        }
        ws.socket.on('data', data => {
          const text = typeof data === 'string' ? data : Buffer.from(data).toString('utf8')
          let frame
          try { frame = JSON.parse(text) } catch { frame = { unparsed: text } }
          send({ ev: 'received', frame })
        })
        ws.socket.on('close', () => send({ ev: 'closed' }))
        send({ ev: 'ready' })
      } else if (msg.cmd === 'add') {
        const c = newClient(msg.add, msg.left)
        c.on('warning', err => send({ ev: 'warning', message: err.message }))
        c.on('error', err => send({ ev: 'error', message: err.message }))
        send({ ev: 'added', infoHash: msg.add, sameSocket: c._trackers[0].socket === client._trackers[0].socket })
      } else if (msg.cmd === 'start') {
        target.start()
      } else if (msg.cmd === 'complete') {
        target.state.left = 0
        target.complete()
      } else if (msg.cmd === 'stop') {
        target.stop()
      } else if (msg.cmd === 'scrape') {
        client.scrape(msg.infoHashes ? { infoHash: msg.infoHashes } : undefined)
      } else if (msg.cmd === 'exit') {
        process.exit(0)
      }
    } catch (err) {
      send({ ev: 'error', message: err.stack || err.message })
    }
  })
  process.on('disconnect', () => process.exit(0))
  send({ ev: 'alive' })
}

function pick (obj, keys) {
  const out = {}
  for (const k of keys) if (obj[k] !== undefined) out[k] = obj[k]
  return out
}

// --- The parent: peers, steps and checks -------------------------------------

class Peer {
  constructor (name, peerIdBytes) {
    this.name = name
    this.peerId = bin(peerIdBytes)
    this.events = []
    this.waiters = []
    const env = { ...process.env, STAND_IN_TAG: name }
    if (opts.ca) env.NODE_EXTRA_CA_CERTS = opts.ca
    this.child = fork(fileURLToPath(import.meta.url), ['--peer'], { env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    this.child.on('message', ev => {
      ev.at = Date.now() - started
      this.events.push(ev)
      if (ev.ev === 'warning' || ev.ev === 'error') log(`${name}: ${ev.ev}: ${ev.message}`)
      this.waiters = this.waiters.filter(w => !w(ev))
    })
    this.exited = new Promise(resolve => this.child.once('exit', resolve))
  }

  cmd (cmd, extra = {}) { this.child.send({ cmd, ...extra }) }

  // The first event from `since` on (an index into this.events) that
  // `match` accepts, within `ms`; null when none came.
  waitFor (match, { since = 0, ms = 5000 } = {}) {
    const found = this.events.slice(since).find(match)
    if (found) return Promise.resolve(found)
    return new Promise(resolve => {
      const timer = setTimeout(() => { this.waiters = this.waiters.filter(w => w !== waiter); resolve(null) }, ms)
      const waiter = ev => {
        if (!match(ev)) return false
        clearTimeout(timer)
        resolve(ev)
        return true
      }
      this.waiters.push(waiter)
    })
  }

  mark () { return this.events.length }

  frames (kind, since = 0) { return this.events.slice(since).filter(e => e.ev === kind).map(e => e.frame) }

  async init (infoHash, left) {
    await this.waitFor(e => e.ev === 'alive', { ms: 10000 })
    this.cmd('init', { tracker: opts.tracker, infoHash: hex(infoHash), peerId: hex(this.peerId), left })
    if (!await this.waitFor(e => e.ev === 'ready', { ms: 10000 })) throw new Error(`peer ${this.name} did not start`)
  }

  kill () { this.child.kill('SIGKILL') }
}

const result = { ok: false, tracker: opts?.tracker, checks: [], info: {} }
const peers = []

function check (name, ok, detail = {}) {
  result.checks.push({ name, ok: !!ok, ...detail })
  log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ' ' + JSON.stringify(detail)}`)
  return !!ok
}

// A response frame for `infoHash`: the tracker's answer to an announce, with
// the swarm's counts.
const isAnnounceAnswer = infoHash => f => f.action === 'announce' && f.info_hash === infoHash && f.complete !== undefined

async function runChecks () {
  const timer = setTimeout(() => {
    check('finished within --timeout', false, { timeout_s: Number(opts.timeout) })
    finish()
  }, Number(opts.timeout) * 1000)
  try {
    await steps()
  } catch (err) {
    check('no exception in the script', false, { error: err.stack || String(err) })
  }
  clearTimeout(timer)
  finish()
}

function finish () {
  for (const p of peers) p.kill()
  result.ok = result.checks.length > 0 && result.checks.every(c => c.ok)
  result.elapsed_ms = Date.now() - started
  console.log(JSON.stringify(result))
  process.exit(result.ok ? 0 : 1)
}

async function steps () {
  // Bytes that JSON must escape or that are not ASCII, in the info-hash and
  // in B's peer id: the tracker must hand them back as they came.
  const infoHash = bin(Buffer.concat([Buffer.from([0x00, 0x22, 0x5c, 0x7f, 0x80, 0xff, 0x0a]), randomBytes(13)]))
  result.info.info_hash = hex(infoHash)
  const a = new Peer('A', Buffer.concat([Buffer.from('-TS0001-'), Buffer.from(randomBytes(6).toString('hex'))]))
  const b = new Peer('B', Buffer.concat([Buffer.from('-TS0001-'), Buffer.from([0x22, 0x5c, 0xe9, 0x00]), randomBytes(8)]))
  peers.push(a, b)
  await Promise.all([a.init(infoHash, 0), b.init(infoHash, 1000)])

  // A, a seeder, announces first. Nothing after this can pass if A's
  // connection fails or its announce goes unanswered: stop there.
  a.cmd('start')
  const first = await a.waitFor(e => (e.ev === 'received' && isAnnounceAnswer(infoHash)(e.frame)) ||
    e.ev === 'warning' || e.ev === 'closed')
  if (first?.ev !== 'received') {
    // The client's warning says little: a handshake of our own says more.
    const handshake = await exchange(JSON.stringify({ action: 'scrape', info_hash: infoHash }))
    check('A connects and its first announce is answered', false,
      { event: first ?? 'nothing within 5 s', sent: a.frames('sent'), received: a.frames('received'), handshake })
    return
  }
  check('A connects and its first announce is answered', true)
  const aAnswer = first
  const aStart = a.frames('sent').find(f => f.event === 'started')
  check('A sends `started` with offers', aStart && Array.isArray(aStart.offers) && aStart.offers.length > 0,
    { offers: aStart?.offers?.length })
  check('A gets an announce answer: its info_hash, an interval, complete 1, incomplete 0',
    aAnswer && aAnswer.frame.interval > 0 && aAnswer.frame.complete === 1 && aAnswer.frame.incomplete === 0,
    { answer: aAnswer?.frame })

  // B, a leecher, announces: its offers go to A.
  const aBefore = a.mark()
  b.cmd('start')
  const bAnswer = await b.waitFor(e => e.ev === 'received' && isAnnounceAnswer(infoHash)(e.frame))
  check('B gets an announce answer: complete 1, incomplete 1',
    bAnswer && bAnswer.frame.complete === 1 && bAnswer.frame.incomplete === 1, { answer: bAnswer?.frame })
  const bStart = b.frames('sent').find(f => f.event === 'started')
  const bOffers = new Map((bStart?.offers || []).map(o => [o.offer_id, o.offer]))
  const offerEv = await a.waitFor(e => e.ev === 'received' && e.frame.offer, { since: aBefore })
  const offer = offerEv?.frame
  check('one of B\'s offers reaches A: from B\'s peer_id, for the info_hash, with an offer_id B made, SDP unchanged',
    offer && offer.action === 'announce' && offer.peer_id === b.peerId && offer.info_hash === infoHash &&
      bOffers.has(offer.offer_id) && JSON.stringify(bOffers.get(offer.offer_id)) === JSON.stringify(offer.offer),
    { received: offer && { ...offer, peer_id: hex(offer.peer_id), info_hash: hex(offer.info_hash), offer_id: hex(offer.offer_id) } })

  // A's stand-in answers at once; the answer goes back to B.
  const answerSent = await a.waitFor(e => e.ev === 'sent' && e.frame.answer, { since: aBefore })
  check('A sends its answer with to_peer_id B and the offer\'s offer_id',
    answerSent && offer && answerSent.frame.to_peer_id === b.peerId && answerSent.frame.offer_id === offer.offer_id)
  const answerEv = await b.waitFor(e => e.ev === 'received' && e.frame.answer)
  const answer = answerEv?.frame
  check('A\'s answer reaches B: from A\'s peer_id, with the offer_id, SDP unchanged',
    answer && answerSent && answer.action === 'announce' && answer.peer_id === a.peerId && answer.info_hash === infoHash &&
      answer.offer_id === answerSent.frame.offer_id && JSON.stringify(answer.answer) === JSON.stringify(answerSent.frame.answer),
    { received: answer && { ...answer, peer_id: hex(answer.peer_id), info_hash: hex(answer.info_hash), offer_id: hex(answer.offer_id) } })
  check('B\'s client takes the answer as a peer for its offer (offer_id matched)',
    await b.waitFor(e => e.ev === 'peer' && e.id === hex(a.peerId)))
  // Let any further relays arrive, then count them.
  await new Promise(resolve => setTimeout(resolve, 300))
  check('A gets exactly one offer from B\'s announce (one offer per peer)',
    a.frames('received', aBefore).filter(f => f.offer).length === 1,
    { offers: a.frames('received', aBefore).filter(f => f.offer).length })
  check('no peer is sent its own offer or answer',
    ![a, b].some(p => p.frames('received').some(f => (f.offer || f.answer) && f.peer_id === p.peerId)))

  // Counts through scrape, completed and stopped.
  const scrape = async (want, label) => {
    const since = a.mark()
    a.cmd('scrape')
    const ev = await a.waitFor(e => e.ev === 'scrape', { since })
    check(`scrape ${label}: complete ${want[0]}, incomplete ${want[1]}`,
      ev && ev.data.infoHash === hex(infoHash) && ev.data.complete === want[0] && ev.data.incomplete === want[1],
      { scrape: ev?.data, frame: a.frames('received', since).find(f => f.files) })
  }
  await scrape([1, 1], 'after both started')

  let since = b.mark()
  b.cmd('complete')
  const completed = await b.waitFor(e => e.ev === 'received' && isAnnounceAnswer(infoHash)(e.frame), { since })
  check('B sends `completed` without offers', b.frames('sent', since).some(f => f.event === 'completed' && !f.offers))
  check('B\'s `completed` is answered: complete 2, incomplete 0',
    completed && completed.frame.complete === 2 && completed.frame.incomplete === 0, { answer: completed?.frame })
  await scrape([2, 0], 'after B completed')

  since = b.mark()
  b.cmd('stop')
  const stopped = await b.waitFor(e => e.ev === 'sent' && e.frame.event === 'stopped', { since })
  check('B sends `stopped`', stopped)
  // An answer to `stopped` is optional; the scrape is what counts.
  await b.waitFor(e => e.ev === 'received' && isAnnounceAnswer(infoHash)(e.frame), { since, ms: 1000 })
  await scrape([1, 0], 'after B stopped')

  // Informational: a leecher C whose connection closes without `stopped`.
  const c = new Peer('C', Buffer.concat([Buffer.from('-TS0001-'), Buffer.from(randomBytes(6).toString('hex'))]))
  peers.push(c)
  await c.init(infoHash, 5)
  c.cmd('start')
  await c.waitFor(e => e.ev === 'received' && isAnnounceAnswer(infoHash)(e.frame))
  c.kill()
  await c.exited
  await new Promise(resolve => setTimeout(resolve, 500))
  since = a.mark()
  a.cmd('scrape')
  const afterClose = await a.waitFor(e => e.ev === 'scrape', { since })
  result.info.scrape_after_a_leecher_disconnected_without_stopped = afterClose?.data ?? 'no scrape answer'

  // A second torrent on A's connection (a browser's WebTorrent shares one
  // WebSocket among its torrents), then one scrape for both.
  const infoHash2 = bin(randomBytes(20))
  since = a.mark()
  a.cmd('add', { add: hex(infoHash2), left: 0 })
  const added = await a.waitFor(e => e.ev === 'added', { since })
  a.cmd('start', { infoHash: hex(infoHash2) })
  const second = await a.waitFor(e => e.ev === 'received' && isAnnounceAnswer(infoHash2)(e.frame), { since })
  check('a second torrent announced on the same connection is answered with its own info_hash: complete 1, incomplete 0',
    added?.sameSocket && second && second.frame.complete === 1 && second.frame.incomplete === 0,
    { same_socket: added?.sameSocket, answer: second?.frame && { ...second.frame, info_hash: hex(second.frame.info_hash) } })
  since = a.mark()
  a.cmd('scrape', { infoHashes: [hex(infoHash), hex(infoHash2)] })
  await a.waitFor(e => e.ev === 'scrape' && e.data.infoHash === hex(infoHash2), { since })
  await a.waitFor(e => e.ev === 'scrape' && e.data.infoHash === hex(infoHash), { since, ms: 500 })
  const both = Object.fromEntries(a.events.slice(since).filter(e => e.ev === 'scrape').map(e => [e.data.infoHash, e.data]))
  const counts = h => both[hex(h)] && [both[hex(h)].complete, both[hex(h)].incomplete].join(',')
  check('one scrape of two info-hashes answers for each', counts(infoHash) === '1,0' && counts(infoHash2) === '1,0',
    { scrape: both, frame: a.frames('received', since).find(f => f.files) && Object.keys(a.frames('received', since).find(f => f.files).files).map(hex) })

  await invalidMessages(infoHash)
}

// Each on a connection of its own: the first reply (frame or close) within
// a few seconds.
async function exchange (payload, ms = 3000) {
  const { default: WebSocket } = await import('ws')
  const ws = new WebSocket(opts.tracker, opts.ca ? { ca: readFileSync(opts.ca) } : {})
  return await new Promise(resolve => {
    const timer = setTimeout(() => { ws.terminate(); resolve({ silence: true }) }, ms)
    const done = r => { clearTimeout(timer); ws.terminate(); resolve(r) }
    ws.on('open', () => ws.send(payload))
    ws.on('message', (data, isBinary) => {
      const text = data.toString('utf8')
      let json = null
      try { json = JSON.parse(text) } catch {}
      done({ frame: json ?? text, binary: isBinary })
    })
    ws.on('close', (code, reason) => done({ close: code, reason: reason.toString() }))
    ws.on('error', err => done({ error: err.message }))
  })
}

// Close codes that say the peer sent something wrong.
const ERROR_CLOSE = new Set([1002, 1003, 1007, 1008, 1009])

async function invalidMessages (infoHash) {
  const peerId = '-TS0001-' + randomBytes(6).toString('hex')
  const cases = [
    ['text that is not JSON', 'this is not json'],
    ['JSON that is not an object', '[1,2,3]'],
    ['an unknown action', JSON.stringify({ action: 'bogus', info_hash: infoHash, peer_id: peerId })],
    ['an announce with a 5-byte info_hash', JSON.stringify({ action: 'announce', info_hash: 'short', peer_id: peerId, event: 'started', numwant: 0, offers: [] })],
    ['an announce without peer_id', JSON.stringify({ action: 'announce', info_hash: infoHash, event: 'started', numwant: 0, offers: [] })],
    ['an answer without to_peer_id', JSON.stringify({ action: 'announce', info_hash: infoHash, peer_id: peerId, answer: { type: 'answer', sdp: 'v=0' }, offer_id: 'x'.repeat(20) })]
  ]
  for (const [label, payload] of cases) {
    const reply = await exchange(payload)
    const failure = reply.frame && typeof reply.frame === 'object' && typeof reply.frame['failure reason'] === 'string'
    check(`${label} gets an error`, failure || ERROR_CLOSE.has(reply.close), { sent: payload, reply })
  }
  const valid = JSON.stringify({ action: 'announce', info_hash: infoHash, peer_id: peerId, event: 'started', left: 0, numwant: 0, offers: [], uploaded: 0, downloaded: 0 })
  const reply = await exchange(valid)
  check('after them a valid announce on a new connection is answered',
    reply.frame && isAnnounceAnswer(infoHash)(reply.frame), { reply: reply.frame ? { ...reply.frame, info_hash: hex(reply.frame.info_hash || '') } : reply })
}

// Last, once every declaration above is in place.
if (opts.peer) {
  await runPeer()
} else {
  await runChecks()
}
