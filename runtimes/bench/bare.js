// Bare baseline for the runtime benchmark: node:http with keep-alive,
// answering every request with the body the benchmark handler returns.
'use strict';
const http = require('node:http');
const body = Buffer.from('hello, world');
http.createServer({ keepAliveTimeout: 65000, noDelay: true }, (req, res) => {
  res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': body.length });
  res.end(body);
}).listen(Number(process.env.PORT), '127.0.0.1');
