exports.handler = async () => 'hello, world';
