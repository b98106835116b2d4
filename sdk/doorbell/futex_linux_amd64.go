package doorbell

const sysFutex = 202
