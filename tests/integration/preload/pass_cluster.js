// Node.js cluster under eta-run (pass_test.sh): the primary accepts every
// connection (round robin, the default on Linux) and passes it to a worker
// over the IPC channel (SCM_RIGHTS); the workers echo. The primary prints
// "listening" once every worker listens, and "served by PID" for each
// connection a worker took.
//   node pass_cluster.js PORT WORKERS
'use strict';
const cluster = require('node:cluster');
const net = require('node:net');

const port = Number(process.argv[2]);
const workers = Number(process.argv[3]);
cluster.schedulingPolicy = cluster.SCHED_RR;

if (cluster.isPrimary) {
    let listening = 0;
    for (let i = 0; i < workers; i++) {
        const w = cluster.fork();
        w.on('listening', () => {
            if (++listening === workers)
                console.log('listening');
        });
        w.on('message', (m) => {
            if (m === 'served')
                console.log(`served by ${w.process.pid}`);
        });
    }
} else {
    net.createServer((sock) => {
        process.send('served');
        sock.pipe(sock);
        sock.on('error', (e) => console.error(`worker ${process.pid}: ${e.message}`));
    }).listen(port, '0.0.0.0');
}
