// `&mut self`: each attempt reborrows `self` (the body may mutate it), arguments included.
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Session {
    attempts: u32,
    log: Vec<String>,
}

impl Session {
    #[retry(upstream = "session", method = GET)]
    pub async fn refresh(&mut self, out: &mut Vec<u32>) -> Result<u32, AdapterError> {
        self.attempts += 1;
        self.log.push(format!("attempt {}", self.attempts));
        out.push(self.attempts);
        let me = &mut *self;
        me.attempts += 0;
        Ok(self.attempts)
    }
}

fn main() {
    let mut s = Session { attempts: 0, log: Vec::new() };
    let mut out = Vec::new();
    let _future = s.refresh(&mut out);
}
