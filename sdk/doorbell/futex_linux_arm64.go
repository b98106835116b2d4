package doorbell

const sysFutex = 98
