// One WebTorrent peer in the page: transfer.mjs calls window.seed() in one
// browser and window.leech() in the other, and reads window.peerStatus() when
// it gives up. Progress goes to the console, which the driver forwards.

import WebTorrent from '/webtorrent.min.js'
import { makeData } from '/data.mjs'

const started = performance.now()
const log = (...args) => console.log(`[${((performance.now() - started) / 1000).toFixed(2)}s]`, ...args)
const warnings = []
let client = null
let current = null
// Resolves with a reason when a peer can no longer succeed (its tracker
// connection failed), so that the driver stops at once rather than at its
// time-out; webtorrent itself would only retry later.
let fatal
window.fatal = new Promise(resolve => { fatal = resolve })

function hex (buffer) {
  return Array.from(new Uint8Array(buffer), b => b.toString(16).padStart(2, '0')).join('')
}

async function sha256 (bytes) {
  return hex(await crypto.subtle.digest('SHA-256', bytes))
}

function newClient () {
  // No STUN or TURN servers (the default names public ones): candidates are
  // this machine's own addresses only.
  const c = new WebTorrent({ tracker: { rtcConfig: { iceServers: [] } } })
  c.on('error', err => log('client error:', err.message || String(err)))
  return c
}

function watch (torrent, role) {
  current = torrent
  torrent.on('warning', err => {
    const message = err.message || String(err)
    warnings.push(message)
    log(`${role} warning:`, message)
    if (message.startsWith('Error connecting to')) fatal(`${role}: ${message}`)
  })
  torrent.on('error', err => log(`${role} torrent error:`, err.message || String(err)))
  torrent.on('wire', (wire, addr) => log(`${role}: connected to a peer`, addr || wire.remoteAddress || ''))
  torrent.on('noPeers', source => log(`${role}: no peers yet from ${source}`))
}

// The announce URLs a torrent ended up with must be exactly the test's: no
// default or global trackers that could reach out.
function checkAnnounce (torrent, tracker) {
  const announce = torrent.announce || []
  if (announce.length !== 1 || announce[0] !== tracker) {
    throw new Error(`torrent announces to ${JSON.stringify(announce)}, not only ${tracker}`)
  }
}

window.seed = async ({ seed, size, tracker, name }) => {
  client = newClient()
  const data = makeData(seed, size)
  const hash = await sha256(data)
  const file = new File([data], name, { type: 'application/octet-stream' })
  const t0 = performance.now()
  const torrent = await new Promise((resolve, reject) => {
    client.once('error', reject)
    client.seed(file, { announce: [tracker], name }, resolve)
  })
  watch(torrent, 'seeder')
  checkAnnounce(torrent, tracker)
  log('seeding', torrent.infoHash, 'to', tracker)
  return { infoHash: torrent.infoHash, sha256: hash, length: torrent.length, seedMs: Math.round(performance.now() - t0) }
}

window.leech = async ({ infoHash, tracker, name }) => {
  client = newClient()
  const magnet = `magnet:?xt=urn:btih:${infoHash}&dn=${encodeURIComponent(name)}&tr=${encodeURIComponent(tracker)}`
  const t0 = performance.now()
  const torrent = client.add(magnet)
  watch(torrent, 'leecher')
  await new Promise((resolve, reject) => {
    torrent.once('done', resolve)
    torrent.once('error', reject)
    client.once('error', reject)
  })
  checkAnnounce(torrent, tracker)
  const ms = Math.round(performance.now() - t0)
  log('download done in', ms, 'ms from', torrent.numPeers, 'peer(s)')
  if (torrent.files.length !== 1) throw new Error(`${torrent.files.length} files in the torrent, not 1`)
  const bytes = await torrent.files[0].arrayBuffer()
  return { sha256: await sha256(bytes), length: bytes.byteLength, downloadMs: ms, numPeers: torrent.numPeers }
}

window.peerStatus = () => current && {
  infoHash: current.infoHash,
  ready: current.ready,
  done: current.done,
  progress: current.progress,
  numPeers: current.numPeers,
  downloaded: current.downloaded,
  uploaded: current.uploaded,
  warnings
}

window.ready = true
