// The pages and the WebTorrent browser bundle, served on 127.0.0.1 from a
// fixed list of files (nothing else on disk is reachable).

import { createServer } from 'node:http'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

const here = path => fileURLToPath(new URL(path, import.meta.url))

const FILES = {
  '/': ['../page/transfer.html', 'text/html; charset=utf-8'],
  '/transfer.js': ['../page/transfer.js', 'text/javascript'],
  '/data.mjs': ['./data.mjs', 'text/javascript'],
  '/webtorrent.min.js': ['../node_modules/webtorrent/dist/webtorrent.min.js', 'text/javascript']
}

// Resolves to { server, origin } once listening on a free port.
export async function startStaticServer () {
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1')
    const entry = FILES[url.pathname]
    if (req.method !== 'GET' || !entry) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n')
      return
    }
    try {
      const body = await readFile(here(entry[0]))
      res.writeHead(200, { 'content-type': entry[1], 'cache-control': 'no-store' }).end(body)
    } catch (err) {
      res.writeHead(500, { 'content-type': 'text/plain' }).end(`${err.message}\n`)
    }
  })
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', resolve)
  })
  return { server, origin: `http://127.0.0.1:${server.address().port}` }
}
