// Node.js cluster under eta-run (pass_test.sh): the primary accepts every
// connection (round robin, the default on Linux) and passes each to a worker
// over the IPC channel (SCM_RIGHTS); the workers echo. Prints "listening"
// once every worker listens, and each worker's pid and connection count when
// the primary is told to stop (SIGTERM).
//   node pass_cluster.js PORT WORKERS
'use strict';
const cluster = require('node:cluster');
const net = require('node:net');

const port = Number(process.argv[2]);
const workers = Number(process.argv[3]);
cluster.schedulingPolicy = cluster.SCHED_RR;

if (cluster.isPrimary) {
    let listening = 0;
    const served = new Map();
    for (let i = 0; i < workers; i++) {
        const w = cluster.fork();
        w.on('listening', () => {
            if (++listening === workers)
                console.log('listening');
        });
        w.on('message', (m) => served.set(w.process.pid, m.served));
    }
    process.on('SIGTERM', () => {
        for (const id in cluster.workers)
            cluster.workers[id].send('report');
        setTimeout(() => {
            for (const [pid, n] of served)
                console.log(`worker ${pid} served ${n}`);
            for (const id in cluster.workers)
                cluster.workers[id].kill();
            process.exit(0);
        }, 1000);
    });
} else {
    let served = 0;
    net.createServer((sock) => {
        served++;
        sock.pipe(sock);
        sock.on('error', (e) => console.error(`worker ${process.pid}: ${e.message}`));
    }).listen(port, '0.0.0.0');
    process.on('message', (m) => {
        if (m === 'report')
            process.send({ served });
    });
}
