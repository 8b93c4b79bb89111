#!/usr/bin/env node
// A developer aid, not a test: webtorrent's own tracker (bittorrent-tracker's
// Server) on 127.0.0.1, to check the harness (transfer.mjs, protocol.mjs)
// against the reference implementation, or to compare its frames with ours.
//
//   node tests/webtorrent/reference-server.mjs [--port N] [--tls-port N --cert leaf.pem --key key.pem] [--frames]
//
// Serves ws:// on --port (default: a free one) and, with --cert and --key,
// wss:// on --tls-port; one swarm table behind both. Prints one line of JSON
// with the URLs, then runs until stopped. --frames logs every frame received
// and sent on stderr.

import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import { parseArgs } from 'node:util'
import './lib/use-stand-in.mjs'

const { values: opts } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    'tls-port': { type: 'string', default: '0' },
    cert: { type: 'string' },
    key: { type: 'string' },
    frames: { type: 'boolean', default: false }
  }
})

// After the stand-in for WebRTC is in place (the package imports it).
const { Server } = await import('bittorrent-tracker')
const tracker = new Server({ udp: false, http: false, stats: false, ws: { noServer: true } })
tracker.on('warning', err => console.error('warning:', err.message))
tracker.on('error', err => console.error('error:', err.message))

let connections = 0
tracker.ws.on('connection', socket => {
  if (!opts.frames) return
  const id = ++connections
  console.error(`#${id} open`)
  socket.on('message', data => console.error(`#${id} <- ${data}`))
  const send = socket.send.bind(socket)
  socket.send = (data, ...rest) => {
    console.error(`#${id} -> ${data}`)
    return send(data, ...rest)
  }
  socket.on('close', (code, reason) => console.error(`#${id} closed ${code} ${reason}`))
})

function serveUpgrades (server) {
  server.on('request', (req, res) => res.writeHead(404).end())
  server.on('upgrade', (req, socket, head) => {
    tracker.ws.handleUpgrade(req, socket, head, ws => tracker.ws.emit('connection', ws, req))
  })
}

async function listen (server, port) {
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(Number(port), '127.0.0.1', resolve)
  })
  return server.address().port
}

const plain = http.createServer()
serveUpgrades(plain)
const urls = { ws: `ws://127.0.0.1:${await listen(plain, opts.port)}/announce` }
if (opts.cert && opts.key) {
  const secure = https.createServer({ cert: readFileSync(opts.cert), key: readFileSync(opts.key) })
  serveUpgrades(secure)
  urls.wss = `wss://localhost:${await listen(secure, opts['tls-port'])}/announce`
}
console.log(JSON.stringify(urls))
