// Headless Chromium processes for the tests: one per peer, each with its own
// profile and its own $HOME (where Chromium reads the NSS database that trusts
// the test CA), driven over the DevTools protocol with puppeteer-core.

import { spawn, execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import puppeteer from 'puppeteer-core'

// Debian's chromium: /usr/bin/chromium is a shell wrapper around this.
export const CHROMIUM = process.env.CHROMIUM || '/usr/lib/chromium/chromium'

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// Every browser started and not yet stopped, killed at exit whatever happens.
const running = new Set()
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL')
})

function flags (profile) {
  return [
    '--headless=new',
    // The tests run as root, where the sandbox cannot start.
    '--no-sandbox',
    // Without it a page gathers no ICE candidates on loopback.
    '--allow-loopback-in-peer-connection',
    // Stands for a granted camera permission: without one Chromium offers
    // only the default route's address (none where only loopback is up),
    // hidden behind an mDNS name.
    '--use-fake-ui-for-media-stream',
    // Host candidates as plain addresses: no mDNS names, so no multicast.
    '--disable-features=WebRtcHideLocalIpsWithMdns',
    // Nothing may leave the machine: no background requests, no updates, no
    // sync, no first-run pages, no crash reports, and no name resolves to
    // anything but localhost.
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    '--no-default-browser-check',
    '--disable-domain-reliability',
    '--disable-breakpad',
    '--no-pings',
    '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1',
    '--password-store=basic',
    '--disable-dev-shm-usage',
    `--user-data-dir=${profile}`,
    '--remote-debugging-address=127.0.0.1',
    '--remote-debugging-port=0',
    'about:blank'
  ]
}

// An NSS database under `home` that trusts `caFile` (PEM) to identify servers.
function trustCa (home, caFile) {
  const db = path.join(home, '.pki', 'nssdb')
  mkdirSync(db, { recursive: true })
  try {
    execFileSync('certutil', ['-N', '-d', `sql:${db}`, '--empty-password'], { stdio: 'pipe' })
    execFileSync('certutil', ['-A', '-d', `sql:${db}`, '-t', 'C,,', '-n', 'tracker-test-ca', '-i', caFile], { stdio: 'pipe' })
  } catch (err) {
    const detail = err.code === 'ENOENT'
      ? 'certutil not found: run `apt-get install libnss3-tools`'
      : `${err.message}\n${err.stderr || ''}`
    throw new Error(`cannot make an NSS database that trusts ${caFile}: ${detail}`)
  }
}

// Starts one Chromium; resolves to { browser, pid, stderr(), close() }.
// `caFile`: a CA certificate (PEM) the browser is to trust for wss://.
export async function launchChromium ({ name, caFile = null, startTimeoutMs = 20000 }) {
  const root = mkdtempSync(path.join(os.tmpdir(), `tracker-wt-${name}-`))
  const home = path.join(root, 'home')
  const profile = path.join(root, 'profile')
  mkdirSync(home)
  mkdirSync(profile)
  let child = null
  try {
    if (caFile) trustCa(home, caFile)
    const env = { ...process.env, HOME: home }
    for (const key of ['XDG_CONFIG_HOME', 'XDG_CACHE_HOME', 'XDG_DATA_HOME']) delete env[key]
    child = spawn(CHROMIUM, flags(profile), { env, stdio: ['ignore', 'ignore', 'pipe'] })
    running.add(child)
    child.once('exit', () => running.delete(child))
    let log = ''
    const endpoint = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name}: Chromium gave no DevTools address within ${startTimeoutMs} ms:\n${log}`)), startTimeoutMs)
      child.once('error', err => {
        clearTimeout(timer)
        reject(new Error(`${name}: cannot start ${CHROMIUM} (${err.message}); run \`apt-get install chromium\``))
      })
      child.once('exit', (code, signal) => {
        clearTimeout(timer)
        reject(new Error(`${name}: Chromium exited (${code ?? signal}) at start:\n${log}`))
      })
      child.stderr.setEncoding('utf8')
      child.stderr.on('data', text => {
        log += text
        if (log.length > 200000) log = log.slice(-100000)
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(log)
        if (m) {
          clearTimeout(timer)
          resolve(m[1])
        }
      })
    })
    const browser = await puppeteer.connect({ browserWSEndpoint: endpoint, defaultViewport: null })
    const pid = child.pid
    const proc = child
    // Every caller waits for the one stop, so none exits before it is done.
    let closing = null
    return {
      browser,
      pid,
      stderr: () => log,
      close () {
        closing ??= stop(proc, browser).finally(() => rmSync(root, { recursive: true, force: true }))
        return closing
      }
    }
  } catch (err) {
    if (child) await stop(child, null)
    rmSync(root, { recursive: true, force: true })
    throw err
  }
}

// Asks the browser to close, then kills it by its process id if it has not
// gone within a few seconds.
async function stop (child, browser) {
  const exited = () => child.exitCode !== null || child.signalCode !== null
  const gone = new Promise(resolve => exited() ? resolve() : child.once('exit', resolve))
  if (browser && !exited()) {
    await Promise.race([browser.close().catch(() => {}), sleep(3000)])
    await Promise.race([gone, sleep(2000)])
  }
  if (!exited()) {
    child.kill('SIGKILL')
    await Promise.race([gone, sleep(2000)])
  }
  running.delete(child)
}
