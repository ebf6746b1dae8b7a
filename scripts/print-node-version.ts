#!/usr/bin/env node
console.log(`node ${process.version}`);
