#!/usr/bin/env node
// A file moves between two real browsers that find each other only through a
// WebSocket tracker.
//
// Two headless Chromium processes (lib/chromium.mjs) each open the test page
// (page/transfer.js, served with WebTorrent's browser bundle from 127.0.0.1).
// One makes a file of random bytes from --seed and seeds it, announcing to
// the first --tracker; the other is given only the info-hash and the second
// --tracker (the first again when there is one) in a magnet link, fetches the
// metadata and the file over WebRTC from the peer the tracker introduced, and
// reports the SHA-256 of what arrived. Node works the expected hash out of the
// seed on its own.
//
//   node tests/webtorrent/transfer.mjs --tracker ws://127.0.0.1:6969/announce
//   node tests/webtorrent/transfer.mjs --tracker wss://localhost:6970/announce --ca ca.pem
//
// --ca: a CA certificate (PEM) that the browsers trust, through an NSS
// database in their own $HOME, to identify a wss:// tracker.
//
// Prints one line of JSON (`ok` true or false) on stdout, the pages' console
// and progress on stderr. Exit status 0 when the hashes are equal, 1 on any
// failure or at --timeout, 2 on bad arguments. The browsers are stopped in
// every case.

import { createHash, randomInt } from 'node:crypto'
import { parseArgs } from 'node:util'
import { launchChromium } from './lib/chromium.mjs'
import { makeData } from './lib/data.mjs'
import { startStaticServer } from './lib/static-server.mjs'

const started = Date.now()
const log = (...args) => console.error(`[${((Date.now() - started) / 1000).toFixed(2)}s]`, ...args)

let opts
try {
  opts = parseArgs({
    options: {
      tracker: { type: 'string', multiple: true },
      ca: { type: 'string' },
      size: { type: 'string', default: String(1 << 20) },
      seed: { type: 'string' },
      timeout: { type: 'string', default: '30' }
    }
  }).values
  if (!opts.tracker || opts.tracker.length > 2) throw new Error('give --tracker URL once or twice (seeder, leecher)')
  for (const url of opts.tracker) {
    if (!/^wss?:\/\//.test(url)) throw new Error(`not a ws:// or wss:// URL: ${url}`)
  }
} catch (err) {
  console.error(`transfer.mjs: ${err.message}`)
  process.exit(2)
}

const size = Number(opts.size)
const seed = opts.seed === undefined ? randomInt(2 ** 31) : Number(opts.seed)
const timeoutMs = Number(opts.timeout) * 1000
const [seederTracker, leecherTracker = seederTracker] = opts.tracker
const name = `random-${seed}.bin`

const result = {
  ok: false,
  seeder_tracker: seederTracker,
  leecher_tracker: leecherTracker,
  size,
  seed,
  expected_sha256: createHash('sha256').update(makeData(seed, size)).digest('hex')
}
const browsers = []
const pages = {}
let server = null

async function openPage (browser, role, origin) {
  const page = await browser.newPage()
  page.on('console', msg => log(`${role} page:`, msg.text()))
  page.on('pageerror', err => log(`${role} page error:`, err.message))
  await page.goto(`${origin}/`, { waitUntil: 'load' })
  await page.waitForFunction('window.ready === true', { timeout: 10000 })
  pages[role] = page
  return page
}

async function run () {
  const served = await startStaticServer()
  server = served.server
  log('pages served from', served.origin)
  const launched = await Promise.allSettled(['seeder', 'leecher'].map(role =>
    launchChromium({ name: role, caFile: opts.ca }).then(b => { browsers.push(b); return b })))
  const failed = launched.find(p => p.status === 'rejected')
  if (failed) throw failed.reason
  const [seederBrowser, leecherBrowser] = launched.map(p => p.value)
  log(`browsers started: seeder pid ${seederBrowser.pid}, leecher pid ${leecherBrowser.pid}`)
  const seederPage = await openPage(seederBrowser.browser, 'seeder', served.origin)
  const leecherPage = await openPage(leecherBrowser.browser, 'leecher', served.origin)

  // A tracker connection that fails ends the test (the browser console,
  // forwarded above, says why).
  const fatal = Promise.race([seederPage, leecherPage].map(page => page.evaluate(() => window.fatal)))
    .then(reason => { throw new Error(`${reason} (the page's console above says why)`) })
  fatal.catch(() => {})
  const step = promise => Promise.race([promise, fatal])

  result.seeder = await step(seederPage.evaluate(args => window.seed(args), { seed, size, tracker: seederTracker, name }))
  log('seeder ready:', JSON.stringify(result.seeder))
  if (result.seeder.sha256 !== result.expected_sha256) {
    throw new Error(`the seeder's page made other bytes (${result.seeder.sha256}) than Node expects`)
  }
  result.leecher = await step(leecherPage.evaluate(args => window.leech(args), { infoHash: result.seeder.infoHash, tracker: leecherTracker, name }))
  log('leecher done:', JSON.stringify(result.leecher))
  if (result.leecher.length !== size || result.leecher.sha256 !== result.expected_sha256) {
    throw new Error(`the download differs: ${result.leecher.length} bytes with SHA-256 ${result.leecher.sha256}`)
  }
  result.ok = true
}

async function peerStatus () {
  const status = {}
  for (const [role, page] of Object.entries(pages)) {
    status[role] = await Promise.race([
      page.evaluate(() => window.peerStatus()).catch(err => `unavailable: ${err.message}`),
      new Promise(resolve => setTimeout(() => resolve('unavailable: no answer'), 2000))
    ])
  }
  return status
}

async function cleanUp () {
  await Promise.all(browsers.map(b => b.close().catch(err => log('stopping a browser:', err.message))))
  if (server) server.close()
}

function finish (code) {
  result.elapsed_ms = Date.now() - started
  console.log(JSON.stringify(result))
  process.exit(code)
}

let stoppedBy = null
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, async () => {
    stoppedBy = signal
    result.error = `stopped by ${signal}`
    await cleanUp()
    finish(1)
  })
}

let timer
const timedOut = new Promise((resolve, reject) => {
  timer = setTimeout(() => reject(new Error(`no complete transfer within ${timeoutMs / 1000} s`)), timeoutMs)
})
try {
  await Promise.race([run(), timedOut])
} catch (err) {
  result.error = stoppedBy ? `stopped by ${stoppedBy}` : (err.message || String(err))
  log('FAILED:', result.error)
  result.peers = await peerStatus()
  log('peer status:', JSON.stringify(result.peers))
}
clearTimeout(timer)
await cleanUp()
finish(result.ok ? 0 : 1)
